import SparseCacheEngine
import SparseCacheStore

extension ProgressiveCache {
    /// The present byte ranges of `key` and its length, for a status page: from the open
    /// resource when it is open here, else from its committed index (not opened, so not
    /// touched). Nil when the key is not a sparse resource in the store.
    package func presentRanges(key: String) async -> (length: Int64?, ranges: [Range<Int64>])? {
        if let file = resources[key]?.handle?.file {
            return (await file.length, await file.presentRanges())
        }
        return await store.storedPresentRanges(key: key)
    }

    /// A resource with fetches from the origin running now.
    package struct Filling: Sendable, Equatable {
        package var key: String
        package var fetches: Int
        package var readers: Int
    }

    /// The resources being filled now (fetches in flight), at most `limit` of them.
    package func filling(limit: Int) -> [Filling] {
        var filling: [Filling] = []
        for resource in resources.values where !resource.fetches.isEmpty {
            filling.append(Filling(key: resource.key, fetches: resource.fetches.count, readers: resource.users))
            if filling.count >= limit { break }
        }
        return filling.sorted { $0.key < $1.key }
    }
}
