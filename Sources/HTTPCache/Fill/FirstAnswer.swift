/// An origin's answer already received, that a fetch reads first instead of asking.
struct FirstAnswer {
    var response: RangeResponse
    /// The answer to a request without a range: read on to the resource's end.
    var readsOn: Bool
}
