// One grammar for fault rules: the text of SPARSECACHE_FAULTS and the Swift API are the same
// rules, parsed by one parser; errors name the token that does not parse.
import SparseCacheTesting
import Testing

@testable import SparseCacheEngine
import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

@Suite("fault rules: one grammar for the environment and Swift")
struct FaultGrammarTests {
    @Test(
        "text and Swift values are the same rules, and description writes the text back",
        arguments: [
            ("pwrite:path=movie:nth=3:errno=ENOSPC", FaultRule([.pwrite], pathContains: "movie", trigger: .nth(3), error: ENOSPC)),
            ("fdatasync:every:errno=EIO", FaultRule([.fdatasync], trigger: .every, error: EIO)),
            ("fdatasync:after=0:errno=EIO", FaultRule([.fdatasync], trigger: .every, error: EIO)),
            ("sync:after=10:crash", FaultRule([.fsync, .fdatasync], trigger: .after(10), crashStatus: 86)),
            (
                "pwrite:path=.scidx:nth=2:times=1:torn=100:crash=9",
                FaultRule([.pwrite], pathContains: ".scidx", trigger: .nth(2), maxFires: 1, tornBytes: 100, crashStatus: 9)
            ),
            ("pread:prob=0.25:seed=7:errno=EINTR", FaultRule([.pread], trigger: .probability(0.25, seed: 7), error: EINTR)),
            (
                "mutating:prefix=/tmp/x/:snapshot=/tmp/snaps:variants=4:seed=3",
                FaultRule(FaultOperation.mutating, pathPrefix: "/tmp/x/", snapshot: "/tmp/snaps", variants: 4, seed: 3)
            ),
            ("fsync:snapshot=/tmp/s", FaultRule([.fsync], snapshot: "/tmp/s")),
            ("open,rename:delay=5:short=3", FaultRule([.open, .rename], shortBytes: 3, delay: .milliseconds(5))),
            ("any:delay_us=250:errno=1234", FaultRule(Set(FaultOperation.allCases), error: 1234, delay: .microseconds(250))),
        ])
    func sameRules(text: String, rule: FaultRule) throws {
        let parsed = try FaultRule(parsing: text)
        #expect(parsed == rule, "\(text) parsed as \(parsed)")
        #expect(try FaultRule(parsing: rule.description) == rule, "\(rule.description) does not parse back")
    }

    @Test("the helpers are one-line spellings of rule text")
    func helpers() throws {
        #expect(
            FaultRule.tornWrite(path: ".scidx", atWrite: 2, keeping: 100)
                == (try FaultRule(parsing: "pwrite:path=.scidx:nth=2:times=1:torn=100")))
        #expect(
            FaultRule.tornWrite(path: "r.bin", atWrite: 1, keeping: 0, then: .error(EIO)).description
                == "pwrite:path=r.bin:nth=1:times=1:errno=EIO:torn=0")
        #expect(
            FaultRule.tornWrite(path: "r", atWrite: 3, keeping: 10, then: .crash).description == "pwrite:path=r:nth=3:times=1:torn=10:crash"
        )
        #expect(FaultRule.syncError(ENOSPC, path: "r.bin", atSync: 2).description == "fdatasync:path=r.bin:nth=2:times=1:errno=ENOSPC")
        #expect(FaultRule.crash(afterSync: 4).description == "fsync,fdatasync:nth=5:crash")
    }

    @Test(
        "errors name the bad token",
        arguments: [
            ("pwrit:errno=EIO", "unknown operation 'pwrit'"),
            ("pwrite:nth=x:errno=EIO", "invalid value 'x' for 'nth'"),
            ("pwrite:errno=EWHAT", "invalid value 'EWHAT' for 'errno'"),
            ("pwrite:bogus=1:errno=EIO", "'bogus=1'"),
            ("pwrite:nth=2", "no effect"),
            ("pwrite:nth=2:every:errno=EIO", "more than one trigger"),
            ("pwrite:variants=3:errno=EIO", "variants= needs snapshot=DIR"),
            ("pwrite:path=a:path=b:errno=EIO", "'path=' given twice"),
            ("pwrite:errno=EIO;fsync:crash", "one rule expected"),
        ])
    func errorsNameTheToken(text: String, message: String) {
        let error = expectErrorSync(.invalidArgument) { try FaultRule(parsing: text) }
        #expect(error?.detail?.contains(message) == true, "\(String(describing: error?.detail))")
    }

    @Test("a list of rules: the bad one is named by its place, and nothing is added")
    func listErrors() {
        let error = expectErrorSync(.invalidArgument) { try FaultInjection.add(spec: "fsync:path=/no/such/:errno=EIO; pwrite:tron=3") }
        #expect(error?.detail?.contains("rule 2: unknown or incomplete field 'tron=3'") == true, "\(String(describing: error))")
    }

    @Test("a crash rule in the test process is refused, naming the harness")
    func crashRuleRefused() {
        let error = expectErrorSync(.invalidArgument) { try FaultInjection.add(.crash(afterSync: 1, path: "/no/such/place/")) }
        #expect(error?.detail?.contains("CrashHarness") == true, "\(String(describing: error))")
        let fromText = expectErrorSync(.invalidArgument) { try FaultInjection.add(spec: "pwrite:path=/no/such/place/:crash") }
        #expect(fromText?.detail?.contains("would end this process") == true)
    }
}
