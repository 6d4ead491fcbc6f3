// swift-tools-version:6.1
import PackageDescription

/// Beacon's Swift SDK, a package of its own so that an app adds it without the server's dependencies. The server's
/// package depends on it by path: the wire protocol has one source.
let package = Package(
    name: "beacon-swift",
    platforms: [.macOS(.v13), .iOS(.v16)],
    products: [
        // Connection, messaging, push tokens and settings, read state.
        .library(name: "BeaconClient", targets: ["BeaconClient"]),
        // The push payload and a notification service extension's helper: Foundation and UserNotifications only.
        .library(name: "BeaconNotifications", targets: ["BeaconNotifications"]),
        // For the server: the domain model and the wire protocol.
        .library(name: "BeaconCore", targets: ["BeaconCore"]),
        .library(name: "BeaconProtocol", targets: ["BeaconProtocol"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        // Linux's WebSocket (Apple platforms use URLSessionWebSocketTask): SwiftNIO's client, without a server framework.
        .package(url: "https://github.com/hummingbird-project/swift-websocket.git", from: "1.6.2"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
    ],
    targets: [
        // Domain rules: ids, messages, validation, errors, JSON. No I/O.
        .target(name: "BeaconCore"),
        // Wire protocol: WebSocket frames and REST bodies shared by the server and the SDK.
        .target(name: "BeaconProtocol", dependencies: ["BeaconCore"]),
        .target(name: "BeaconNotifications", dependencies: ["BeaconCore"]),
        .target(
            name: "BeaconClient",
            dependencies: [
                "BeaconCore", "BeaconProtocol", "BeaconNotifications",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "WSClient", package: "swift-websocket", condition: .when(platforms: [.linux])),
                .product(name: "HTTPTypes", package: "swift-http-types", condition: .when(platforms: [.linux])),
            ]),
        .testTarget(name: "BeaconCoreTests", dependencies: ["BeaconCore", "BeaconProtocol"]),
        // The connection's state machine through a scripted transport, and payload parsing: no server.
        .testTarget(name: "BeaconClientUnitTests", dependencies: ["BeaconClient", "BeaconNotifications", "BeaconProtocol"]),
    ]
)
