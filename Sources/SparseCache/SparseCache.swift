// The library as one import: `import SparseCache` brings every layer a user needs, from the
// engine (SparseFile) to the HTTP cache (ProgressiveCache, CachingProxy). The layers are
// separate modules so the compiler keeps each one from reaching above itself; see
// docs/ARCHITECTURE.md.
@_exported import HTTPCache
@_exported import SparseCacheEngine
@_exported import SparseCacheStore
@_exported import SparseHTTP

import Foundation

extension WallClockTime {
    /// The moment as a Foundation `Date`.
    public var date: Date { Date(timeIntervalSince1970: secondsSince1970) }
}
