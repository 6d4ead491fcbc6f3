import BeaconServer
import BeaconStorage

/// A Tencent identity for tests, with UserSigs Tencent's own generator made for it (PyPI `tls-sig-api-v2` 1.1, its clock
/// pinned at 1764200000, as Tests/BeaconTencentTests/UserSigTests.swift shows):
///
///     api = TLSSigAPIv2.TLSSigAPIv2(1400000777, key)
///     api.gen_sig("administrator", 100*365*86400); api.gen_sig("alice", 100*365*86400); api.gen_sig("administrator", 86400)
///
/// The first two hold at `TestClock`'s start (2027) and long after; the last expired before it.
public enum TencentFixture {
    public static let sdkAppID: Int64 = 1_400_000_777
    public static let secretKey = "c0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ff"
    public static let adminSig =
        "eJyrVgrxCdYrSy1SslJQMtIzUNJRAItkpqTmlWSmZUIkElNyM-Myi0uKEkvyi2BKilOyEwsKMlOACgxNDEDA3NwcKpdaUZBZlAqUMTY0NTYDS0JlSjJzQeKG5mYmRsjixZnpIJuKc4wtTZy8nLIqUhItXSMtDXJCvUsCUiMqkv0rnP2qUlz9S0JKkkyNfCOzbZVqATCzNqQ_"
    public static let aliceSig =
        "eJyrVgrxCdYrSy1SslJQMtIzUNJRAItkpqTmlWSmZUIkEnMyk1NhUsUp2YkFBZkpQAlDEwMQMDc3h8qlVhRkFqUCZYwNTY3NwJJQmZLMXJC4obmZiRGyeHFmOsgGiwgPbR-3wGyPiuRsC7*cVOdk-TDLpJLKosA850rDSPMSt1KPdH-98ODKbFulWgDRYTMn"
    public static let expiredAdminSig =
        "eJw1jd0KgkAQRl9F9jpERdwIuhBRloxCtqIuxdlqCH9YJxWid881nctzDt982Gkv7U5ptrGYZztsZU0EQVWEd-yLHEqssCWdU62XpIVX3jQIY*D6jjnO*ezU0KBWo1kHo5ohYWmQywPfm-plCB-mCV56ElmRiLp-H1w5yLMSVwBKoiDepekt48cCwujZyXDLvj9gcTXL"

    /// Gives the test server's app this identity (as `beacon app tencent --sdkappid --secret-key` does).
    public static func give(_ beacon: TestBeacon) async throws {
        guard let app = try await beacon.store.app(beacon.app) else { throw TestFailure("no app \(beacon.app)") }
        _ = try await TencentIdentities.assign(
            to: app, in: beacon.store, box: SecretBox(key: testSecretKey), sdkAppID: sdkAppID, secretKey: secretKey)
    }

    /// The query of a `/v4` request.
    public static func query(sdkAppID: String = String(sdkAppID), identifier: String = "administrator", userSig: String = adminSig)
        -> String
    {
        "sdkappid=\(sdkAppID)&identifier=\(identifier)&usersig=\(userSig)&random=42&contenttype=json"
    }
}
