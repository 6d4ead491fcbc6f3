import Testing

@testable import BeaconTencent

/// UserSigs made by Tencent's own generator (PyPI `tls-sig-api-v2` 1.1, `TLSSigAPIv2.py`), its clock pinned so that they
/// can be written here:
///
///     import time, TLSSigAPIv2
///     time.time = lambda: 1764200000
///     api = TLSSigAPIv2.TLSSigAPIv2(1400000001, key)
///     api.gen_sig("administrator", 86400); api.gen_sig("xiaojun", 180*86400)
///     api.gen_sig_with_userbuf("xiaojun", 86400, b"abc"); TLSSigAPIv2.TLSSigAPIv2(1400000002, key).gen_sig("xiaojun", 86400)
///     api.gen_sig("administrator", -10)
///
/// The end-to-end test (`e2e/tencent`) makes fresh ones with the same generator through a Tencent server SDK.
@Suite struct UserSigTests {
    static let key = "5bd2850fff3ecb11d7c805251c51ee463a25727bddc2385f3fa8bfee1bb93b5e"
    static let made: Int64 = 1_764_200_000
    static let admin =
        "eJyrVgrxCdYrSy1SslJQMtIzUNJRAItkpqTmlWSmZUIkElNyM-Myi0uKEkvyi2BKilOyEwsKMlOACgxNDCDAECqXWlGQWZQKlLEwA0pBBUsyc0FChuZmJkZg1TCDMtNBljibJKbopzq65YSkZWR6pum75ruZO-pZauf7J1Wkpbg4u7sFmDqVFJkFeKbbKtUCADUfNM0_"
    static let user180Days =
        "eJyrVgrxCdYrSy1SslJQMtIzUNJRAItkpqTmlWSmZUIkKjIT87NK82CSxSnZiQUFmSlAKUMTAwgwhMqlVhRkFqWCZExNTY2AElDxksxcsKi5mYkRWAPMrMx0kA3GIY4WKVFB3k6hfpFeeUkWpSZVOeUujon5wYmVlZWpYaXpRuZ*VX7Zvo6utkq1AB5yM*o_"
    static let userWithBuffer =
        "eJyrVgrxCdYrSy1SslJQMtIzUNJRAItkpqTmlWSmZUIkKjIT87NK82CSxSnZiQUFmSlAKUMTAwgwhMqlVhRkFqUCZSzMgFJQwZLMXJCQobmZiRFYNVS8tDi1KKk0DWRFZLhXFtz8zHSQkItPkU9QVV5BqU*Rm7ZPboaffmCBSVaIh6*Pe166r1ladpmRS3JYWmpGVLmtUi0AcNE6Nw__"
    static let otherApp =
        "eJyrVgrxCdYrSy1SslJQMtIzUNJRAItkpqTmlWSmZUIkKjIT87NK82CSxSnZiQUFmSlAKUMTAwgwgsqlVhRkFqUCZSzMgFJQwZLMXJCQobmZiRFYNcygzHSQ8YHpBVmeQWWOOdmlqal*xr4ujqmGHmbaviFJUal*HqbpJgEFmV4Vhiaupp62SrUAnfkyaQ__"

    func verify(_ sig: String, _ identifier: String, app: Int64 = 1_400_000_001, key: String = key, now: Int64 = made) throws(UserSig
        .Failure)
        -> UserSig
    {
        try UserSig.verify(sig, identifier: identifier, sdkAppID: app, key: key, now: now)
    }

    @Test func acceptsWhatTencentsGeneratorMakes() throws {
        let admin = try verify(Self.admin, "administrator")
        #expect(admin == UserSig(identifier: "administrator", sdkAppID: 1_400_000_001, time: Self.made, expire: 86400, userbuf: nil))
        #expect(try verify(Self.user180Days, "xiaojun").expire == 180 * 86400)
        #expect(try verify(Self.userWithBuffer, "xiaojun").userbuf == "YWJj")
    }

    @Test func holdsUntilItsExpiryAndNotAfter() throws {
        #expect(try verify(Self.admin, "administrator", now: Self.made + 86400).identifier == "administrator")
        #expect(throws: UserSig.Failure.expired) { try verify(Self.admin, "administrator", now: Self.made + 86401) }
        // `gen_sig("administrator", -10)`: made expired, which the generator allows.
        let madeExpired =
            "eJw1jV8LgjAUR7*K7Ll0GyMx6DlIH4QN6nW6W95CW3OZEH33-Hsfzzn87peoTIYdOLIPCA8p2QQTQQONxyvOQpsaG2y90-7p1qQ1D20tmiFggs7HFge9RQeD2TK6II-1CFi8E3xq1xm8jS-SCvMYrDxTX4BjlzJ-JxGH9J51p0*hEtkrFon2dTTlgfz*7LA1Kw__"
        #expect(throws: UserSig.Failure.expired) { try verify(madeExpired, "administrator") }
    }

    @Test func refusesAnotherUserAppOrKey() {
        #expect(throws: UserSig.Failure.wrongIdentifier) { try verify(Self.admin, "xiaojun") }
        #expect(throws: UserSig.Failure.wrongApp) { try verify(Self.otherApp, "xiaojun") }
        #expect(throws: UserSig.Failure.badSignature) {
            try verify(Self.admin, "administrator", key: String(Self.key.reversed()))
        }
    }

    @Test(arguments: [
        "", "not base64!", "eJyrVgrxCdYrSy1SslJQ", String(repeating: "A", count: 9000), "AAAA",
        // zlib of `[]`, of `{"TLS.identifier":"a"}`, and of the admin's document with `TLS.sig` "not base64!" (Python's zlib).
        "eJyLjgUAARUAuQ__", "eJyrVgrxCdbLTEnNK8lMy0wtUrJSSlSqBQBWUgdg",
        "eJyrVgrxCdYrSy1SslJQMtIzUNJRAItkpqTmlWSmZUIkElNyM-Myi0uKEkvyi2BKilOyEwsKMlOACgxNDCDAECqXWlGQWZQKlLEwA0lBRUsyc0FihuZmJkZg5TCTMtNBtuTllygkJRanmpkoKtUCADbiKq4_",
    ])
    func refusesWhatIsNotAUserSig(_ text: String) {
        #expect {
            try verify(text, "administrator")
        } throws: { error in
            if case .malformed = error as? UserSig.Failure { true } else { false }
        }
    }

    /// `gen_sig("x\nTLS.sdkappid:1", 86400)`: the generator signs it, but a line break in a field could pass for other fields
    /// of the signed text.
    @Test func refusesALineBreakInAField() {
        let spliced =
            "eJyrVgrxCdYrSy1SslJQMtIzUNJRAItkpqTmlWSmZUIkKmLyQILFKdmJBQWZKVaGMGUwEaAiQxMDCDCEyqVWFGQWpQJlLMyAUlDBksxckJChuZmJEVg1zKDMdJBFqanZhf65ARHlLiGOAZkG5n7uBr6epokFJcXFTkV56QXOia4*xTl*UZXJnrZKtQDljjbQ"
        #expect {
            try verify(spliced, "x\nTLS.sdkappid:1")
        } throws: { error in
            if case .malformed = error as? UserSig.Failure { true } else { false }
        }
    }

    @Test func aTamperedFieldBreaksTheSignature() {
        // The admin's document with `TLS.expire` changed to 864000 and compressed again (Python's json and zlib).
        let longer =
            "eJyrVgrxCdYrSy1SslJQMtIzUNJRAItkpqTmlWSmZUIkElNyM-Myi0uKEkvyi2BKilOyEwsKMlOACgxNDCDAECqXWlGQWZQKlLEwA0lBRUsyc0FihuZmJkZg5TCTMtNBtjibJKbopzq65YSkZWR6pum75ruZO-pZauf7J1Wkpbg4u7sFmDqVFJkFeKbbKtUCAGI5NP0_"
        #expect(throws: UserSig.Failure.badSignature) { try verify(longer, "administrator") }
    }
}
