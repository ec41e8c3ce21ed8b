import Testing
import TestSupport
@testable import HTTPCache

/// Runs `body` and expects it to throw an ``OriginError`` of `kind`: records an issue (with
/// `comment`) otherwise and returns the error when it matched.
@discardableResult
func expectOriginError<T>(
    _ kind: OriginError.Kind, _ comment: @autoclosure () -> String = "",
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () async throws -> T
) async -> OriginError? {
    do {
        let value = try await body()
        Issue.record("expected \(kind), got a result: \(value). \(comment())", sourceLocation: sourceLocation)
        return nil
    } catch let error as OriginError {
        if error.kind != kind {
            Issue.record("expected \(kind), got \(error.kind): \(error). \(comment())", sourceLocation: sourceLocation)
            return nil
        }
        return error
    } catch {
        Issue.record("expected \(kind), got \(type(of: error)): \(error). \(comment())", sourceLocation: sourceLocation)
        return nil
    }
}
