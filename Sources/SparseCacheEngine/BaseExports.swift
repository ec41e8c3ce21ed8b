// The base module comes with the engine, as NIOCore comes with NIOPosix: a module that imports
// the engine (`@_spi(Locking)` for `Lock`) also has the lock, the blocking-work bridge and the
// task-locals of SparseCacheBase, without a second import.
@_exported @_spi(Locking) import SparseCacheBase
