// Typed request methods and status codes (RFC 9110, sections 9 and 15).
import Testing
import TestSupport

@testable import HTTPCache
@testable import SparseHTTP

@Suite("HTTP methods and statuses (RFC 9110 9, 15)")
struct HTTPMethodTests {
    static func parse(_ text: String) -> HTTPRequestHead? {
        guard case .request(let head, _, _) = HTTPRequestParser.parse(Array(text.utf8)) else { return nil }
        return head
    }

    @Test("the method token is case-sensitive (RFC 9110 9.1): `get` is not GET, and is not cached")
    func caseSensitive() {
        #expect(HTTPMethod(rawValue: "get") != .get)
        #expect(Self.parse("GET / HTTP/1.1\r\nHost: a\r\n\r\n")?.method == .get)
        #expect(Self.parse("HEAD / HTTP/1.1\r\nHost: a\r\n\r\n")?.method == .head)
        let lower = Self.parse("get / HTTP/1.1\r\nHost: a\r\n\r\n")
        #expect(lower?.method.rawValue == "get")
        #expect(lower?.method != .get)
        #expect(lower.map { $0.method.isGetOrHead } == false)
        let response = HTTPResponseHead(status: 200, headers: [HTTPHeaderField(name: "Cache-Control", value: "max-age=60")])
        let request = HTTPRequestHead(method: HTTPMethod(rawValue: "get"), target: "/", headers: [HTTPHeaderField(name: "Host", value: "a")])
        #expect(!CachePolicy(request: request, response: response, requestTime: 0, responseTime: 0).isStorable)
        #expect(CachePolicy(request: Self.parse("GET / HTTP/1.1\r\nHost: a\r\n\r\n")!, response: response, requestTime: 0, responseTime: 0).isStorable)
    }

    @Test("any other token is a method of its own, kept as sent")
    func extensionMethods() {
        let head = Self.parse("PURGE /a HTTP/1.1\r\nHost: a\r\n\r\n")
        #expect(head?.method == .purge)
        #expect(Self.parse("PROPFIND /a HTTP/1.1\r\nHost: a\r\n\r\n")?.method.rawValue == "PROPFIND")
        #expect(HTTPRequestHead(method: .patch, target: "/x").encoded().starts(with: Array("PATCH /x HTTP/1.1\r\n".utf8)))
    }

    @Test("safe (9.2.1) and idempotent (9.2.2) methods")
    func properties() {
        let rows: [(HTTPMethod, safe: Bool, idempotent: Bool)] = [
            (.get, true, true), (.head, true, true), (.options, true, true), (.trace, true, true),
            (.put, false, true), (.delete, false, true), (.post, false, false), (.patch, false, false),
            (.connect, false, false), (.purge, false, false), ("get", false, false),
        ]
        for (method, safe, idempotent) in rows {
            #expect(method.isSafe == safe, "\(method)")
            #expect(method.isIdempotent == idempotent, "\(method)")
        }
    }

    @Test("status classes and reason phrases (RFC 9110 15)")
    func statuses() {
        #expect(HTTPStatus(103).isInformational && !HTTPStatus(200).isInformational)
        #expect(HTTPStatus(206).isSuccessful && !HTTPStatus(304).isSuccessful)
        #expect(HTTPStatus(308).isRedirection && HTTPStatus(404).isClientError && HTTPStatus(503).isServerError)
        #expect(HTTPStatus(206).reasonPhrase == "Partial Content")
        #expect(HTTPStatus(416).reasonPhrase == "Range Not Satisfiable")
        #expect(HTTPStatus(299).reasonPhrase == "OK")
        #expect(HTTPStatus(418).reasonPhrase == "Client Error")
        #expect(HTTPResponseHead(status: 412).encoded().starts(with: Array("HTTP/1.1 412 Precondition Failed\r\n".utf8)))
    }
}
