// swift-tools-version:6.1
import PackageDescription

// The Swift SDK's package (clients/beacon-swift) holds the domain model and the wire protocol: the server uses them from it.
let beaconCore = Target.Dependency.product(name: "BeaconCore", package: "beacon-swift")
let beaconProtocol = Target.Dependency.product(name: "BeaconProtocol", package: "beacon-swift")
let beaconClient = Target.Dependency.product(name: "BeaconClient", package: "beacon-swift")

let package = Package(
    name: "beacon",
    platforms: [.macOS(.v15), .iOS(.v18)],
    products: [
        .executable(name: "beacon", targets: ["beacon"]),
    ],
    dependencies: [
        .package(path: "clients/beacon-swift"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-auth.git", from: "2.5.0"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-configuration.git", from: "1.4.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        // Tests and benchmarks only (BeaconTesting): child processes (Foundation's `Process.run()` crashes a process with many descriptors on Linux).
        .package(url: "https://github.com/swiftlang/swift-subprocess.git", from: "1.0.2"),
    ],
    targets: [
        // Push rules: who is pushed and when (SPEC §3). Pure: no I/O.
        .target(name: "BeaconPush", dependencies: [beaconCore]),
        // The storage contract: one protocol and its records, whatever the database. No engine code.
        .target(name: "BeaconStorage", dependencies: [beaconCore]),
        // The embedded default engine: one SQLite file (GRDB, WAL).
        .target(name: "BeaconSQLite", dependencies: [
            beaconCore, "BeaconStorage",
            .product(name: "GRDB", package: "GRDB.swift"),
        ]),
        // The engine for several nodes: PostgreSQL through postgres-nio's connection pool.
        .target(name: "BeaconPostgres", dependencies: [
            beaconCore, "BeaconStorage",
            .product(name: "PostgresNIO", package: "postgres-nio"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        // The APNs provider client: HTTP/2 over TLS, token (.p8) and certificate (.p12) auth. Usable alone.
        .target(name: "BeaconAPNs", dependencies: [
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOHTTP2", package: "swift-nio-http2"),
            .product(name: "NIOHPACK", package: "swift-nio-http2"),
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
            .product(name: "Crypto", package: "swift-crypto"),
        ]),
        // A local APNs as strict as Apple's, with fault injection and a control API.
        .target(name: "APNsSimulator", dependencies: [
            "BeaconAPNs",
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOHTTP2", package: "swift-nio-http2"),
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "X509", package: "swift-certificates"),
            .product(name: "SwiftASN1", package: "swift-asn1"),
            .product(name: "NIOHPACK", package: "swift-nio-http2"),
            .product(name: "NIOTLS", package: "swift-nio"),
            .product(name: "Hummingbird", package: "hummingbird"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        // zlib (the system's, Debian: zlib1g-dev), which a Tencent UserSig is compressed with.
        .systemLibrary(name: "CZlib", pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"])]),
        // Tencent Cloud IM's side of things, pure: UserSig v2 and its message elements onto Beacon's. No I/O.
        .target(name: "BeaconTencent", dependencies: [
            beaconCore, "CZlib", .product(name: "Crypto", package: "swift-crypto"),
        ]),
        // The server: REST, WebSocket gateway, presence, retention.
        .target(name: "BeaconServer", dependencies: [
            beaconCore, beaconProtocol, "BeaconStorage", "BeaconAPNs", "BeaconPush", "BeaconTencent",
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
            .product(name: "X509", package: "swift-certificates"),
            .product(name: "Hummingbird", package: "hummingbird"),
            .product(name: "HummingbirdCore", package: "hummingbird"),
            // The request context's identity and the authenticator middlewares (Authentication.swift).
            .product(name: "HummingbirdAuth", package: "hummingbird-auth"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            // The connections' HTTP/1.1 upgraded to devices' WebSockets (GatewayChannel.swift, DeviceSocket.swift).
            .product(name: "NIOHTTP1", package: "swift-nio"),
            .product(name: "NIOWebSocket", package: "swift-nio"),
            .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
            .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "CryptoExtras", package: "swift-crypto"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "Metrics", package: "swift-metrics"),
            .product(name: "Prometheus", package: "swift-prometheus"),
            // The push-result webhook's sender (HTTP/1.1 or 2, TLS, pooled connections, timeouts).
            .product(name: "AsyncHTTPClient", package: "async-http-client"),
            // The settings catalog and `BeaconConfiguration(reader:)`.
            .product(name: "Configuration", package: "swift-configuration"),
        ], resources: [
            // The REST API's OpenAPI 3.1 contract, served at GET /openapi.json (kept true by e2e/contract).
            .embedInCode("openapi.json"),
            // The web console's page, script and style sheet, served under /console/ (no CDN, no build step).
            .embedInCode("Console/index.html"),
            .embedInCode("Console/console.js"),
            .embedInCode("Console/console.css"),
        ]),
        // The one place that opens either engine (`DatabaseLocation`): the executable, the tests and the benchmarks.
        .target(name: "BeaconStores", dependencies: [
            "BeaconStorage", "BeaconSQLite", "BeaconPostgres", .product(name: "Logging", package: "swift-log"),
        ]),
        .executableTarget(name: "beacon", dependencies: [
            "BeaconServer", "BeaconStorage", "BeaconSQLite", "BeaconPostgres", "BeaconStores", "APNsSimulator", "BeaconAPNs",
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Configuration", package: "swift-configuration"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        // Benchmarks: figures for BENCHMARKS.md (run with -c release), never timed assertions.
        .executableTarget(name: "beacon-bench", dependencies: [
            "BeaconServer", "BeaconStorage", "BeaconSQLite", "BeaconPostgres", beaconClient, "BeaconAPNs", "APNsSimulator", "BeaconPush",
            "BeaconTesting", "BeaconStores",
            // Only to measure our APNs client against an AsyncHTTPClient-based sender (`beacon-bench apns`).
            .product(name: "AsyncHTTPClient", package: "async-http-client"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        // What the tests and the benchmarks share (as HummingbirdTesting): a server on either engine, store kinds, a test
        // clock, the simulator and its trust, a REST client, devices, `beacon` as a child process, bounded waits.
        .target(name: "BeaconTesting", dependencies: [
            "BeaconServer", beaconClient, beaconCore, beaconProtocol, "BeaconStorage", "BeaconSQLite", "BeaconStores",
            "APNsSimulator", "BeaconAPNs",
            .product(name: "Subprocess", package: "swift-subprocess"),
            .product(name: "Hummingbird", package: "hummingbird"),
            .product(name: "HummingbirdTesting", package: "hummingbird"),
            .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        .testTarget(name: "BeaconPushTests", dependencies: ["BeaconPush", beaconCore]),
        .testTarget(name: "BeaconTencentTests", dependencies: ["BeaconTencent", beaconCore]),
        .testTarget(name: "BeaconStorageTests", dependencies: [
            "BeaconStorage", "BeaconSQLite", "BeaconPostgres", beaconCore, "BeaconTesting", .product(name: "Logging", package: "swift-log"),
            .product(name: "GRDB", package: "GRDB.swift"),
            // To hold a PostgreSQL transaction open while another runs (race tests).
            .product(name: "PostgresNIO", package: "postgres-nio"),
        ]),
        .testTarget(name: "BeaconAPNsTests", dependencies: [
            "BeaconAPNs", "APNsSimulator", "BeaconTesting",
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOEmbedded", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOHPACK", package: "swift-nio-http2"),
            .product(name: "X509", package: "swift-certificates"),
            .product(name: "SwiftASN1", package: "swift-asn1"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
        ]),
        .testTarget(name: "BeaconServerTests", dependencies: [
            "BeaconServer", beaconClient, "BeaconStorage", "BeaconSQLite", "BeaconPostgres", "APNsSimulator", "BeaconAPNs",
            "BeaconTesting",
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "X509", package: "swift-certificates"),
            .product(name: "SwiftASN1", package: "swift-asn1"),
            .product(name: "Hummingbird", package: "hummingbird"),
            // The router's in-process test client (AccessTests), where no socket is needed.
            .product(name: "HummingbirdTesting", package: "hummingbird"),
            .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
            .product(name: "PostgresNIO", package: "postgres-nio"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "AsyncHTTPClient", package: "async-http-client"),
            .product(name: "NIOCore", package: "swift-nio"),
            // A bare TCP device that never answers (DeviceSocketTests), and the frames it is sent.
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOWebSocket", package: "swift-nio"),
        ]),
        // The SDK's own promises, against a real server.
        .testTarget(name: "BeaconClientTests", dependencies: [
            beaconClient, beaconCore, "BeaconServer", "BeaconTesting",
        ]),
    ]
)
