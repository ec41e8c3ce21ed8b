import SparseCacheEngine

/// The files of a store's `resources` directory, sorted into what they are: the one reading of
/// the directory that start-up (``SparseStore/scan(directory:removing:)``), `ls`
/// (``SparseStore/inspect(directory:)``) and ``StoreVerifier`` share. Every list is sorted.
struct ResourceFiles {
    /// Data files with their index beside them: the resources.
    var resources: [String] = []
    /// Data files without an index: a creation or a removal cut short. They claim nothing.
    var dataWithoutIndex: [String] = []
    /// Indexes without their data file: a power cut after a creation that kept the index's name
    /// and not the data file's (creation syncs no directory, and claims nothing), damage, or a
    /// hand at work. Start-up removes them.
    var indexesWithoutData: [String] = []
    /// Index files of a creation that never reached its rename.
    var temporaryIndexes: [String] = []
    /// Files the store does not name.
    var foreignFiles = 0

    init(names: some Sequence<String>) {
        let present = Set(names)
        for name in present.sorted() {
            if name.hasSuffix(SparseFile.indexSuffix + ".tmp") {
                temporaryIndexes.append(name)
            } else if name.hasSuffix(SparseFile.indexSuffix) {
                let dataName = String(name.dropLast(SparseFile.indexSuffix.count))
                if !ResourceNaming.isResourceName(dataName) {
                    foreignFiles += 1
                } else if !present.contains(dataName) {
                    indexesWithoutData.append(name)
                }
            } else if !ResourceNaming.isResourceName(name) {
                foreignFiles += 1
            } else if present.contains(name + SparseFile.indexSuffix) {
                resources.append(name)
            } else {
                dataWithoutIndex.append(name)
            }
        }
    }

    /// Reads `directory`'s `resources` directory.
    init(directory: String) throws {
        self.init(names: try FileSystem.listDirectory(directory + "/resources"))
    }
}
