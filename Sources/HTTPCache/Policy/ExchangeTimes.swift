#if canImport(Glibc)
    import Glibc
#endif

/// `request_time` and `response_time` of one exchange with an origin (RFC 9111 section 4.2.3),
/// in whole seconds as HTTP dates have them. Both are taken from the wall clock at the response,
/// the request time that many whole seconds earlier as a monotonic clock measured: two
/// `time(nil)` readings a millisecond apart across a second boundary would add a second of
/// response delay, and so of `Age`, to an answer that took no time at all.
struct ExchangeTimes: Sendable {
    private let started = ContinuousClock.now

    init() {}

    /// The times, now that the response's head has arrived.
    func finished() -> (request: Int64, response: Int64) {
        let response = Int64(time(nil))
        return (response - (ContinuousClock.now - started).components.seconds, response)
    }
}
