import APNsSimulator
import BeaconAPNs
import BeaconServer
import Logging
import NIOSSL

/// Runs `body` with a started APNs simulator (cancelled afterwards).
public func withSimulator<T: Sendable>(
    configuration: APNsSimulator.Configuration = .init(environment: .development), _ body: @Sendable (APNsSimulator) async throws -> T
) async throws -> T {
    var logger = Logger(label: "beacon.test.sim")
    logger.logLevel = .warning
    let simulator = try APNsSimulator(configuration: configuration, logger: logger)
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await simulator.run() }
        defer { group.cancelAll() }
        _ = await simulator.endpoints()
        return try await body(simulator)
    }
}

/// A Beacon server pushing to a fresh simulator.
public func withPushBeacon<T: Sendable>(
    clock: TestClock? = nil, hooks: BeaconHooks = BeaconHooks(), _ body: @Sendable (TestBeacon, APNsSimulator) async throws -> T
) async throws -> T {
    try await withSimulator { simulator in
        try await TestBeacon.run(clock: clock, push: simulator, hooks: hooks) { beacon in try await body(beacon, simulator) }
    }
}

extension APNsSimulator {
    /// How a Beacon server reaches this simulator (its port, its CA).
    public func routing() async throws -> APNsRouting {
        let endpoints = await endpoints()
        return .custom(host: "127.0.0.1", port: endpoints.apnsPort, trustRoots: try NIOSSLCertificate.fromPEMBytes(Array(caPEM.utf8)))
    }

    /// Trusts what a push configuration signs with, as `beacon serve --apns-simulator` does for every one it stores.
    public func trust(_ trust: PushTrust) throws {
        switch trust {
        case .tokenKey(let teamID, let keyID, let publicKeyPEM):
            try registerKey(teamID: teamID, keyID: keyID, publicKeyPEM: publicKeyPEM)
        case .certificateAuthorities(let pems, let topics, _):
            for pem in pems { try registerCertificateAuthority(pem: pem, topics: topics) }
        }
    }
}
