import SparseCacheEngine

extension SparseCacheError {
    /// An origin that took too long (no answer, or a body that stopped), as opposed to one that
    /// could not be reached at all (both transports mark it ``SparseCacheError/timedOut``). Not
    /// retried: the wait was already as long as a client should bear, and a proxy answers it
    /// 504 (RFC 9110, section 15.6.5), not 502.
    package var isTimeout: Bool {
        code == .originUnavailable && timedOut
    }
}
