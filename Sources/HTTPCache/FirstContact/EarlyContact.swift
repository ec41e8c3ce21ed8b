/// First contact's request for a new key, sent while the store makes the resource's files
/// (``ProgressiveCache/startEarlyContact(_:source:first:)``): it asks what first contact would
/// ask, under the promotion first contact would take.
struct EarlyContact: Sendable {
    let promotion: ConnectionLimiter.Promotion?
    let task: Task<RangeResponse, Error>

    /// Not used after all (the files could not be made, or the resource was known): the request
    /// is cancelled, and an answer that came anyway is closed.
    func abandon() {
        task.cancel()
        let task = self.task
        Task { (try? await task.value)?.cancel() }
    }
}
