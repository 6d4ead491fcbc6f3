import BeaconAPNs
import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Synchronization

/// A local stand-in for Apple's push service: TLS + HTTP/2 on one port, as strict as APNs, and a plain
/// HTTP/1.1 JSON control API on another (see docs/apns-simulator.md). Run it as a `Service`.
public final class APNsSimulator: Service, Sendable {
    public struct Configuration: Sendable {
        public var host: String
        /// 0 picks a free port.
        public var port: Int
        public var controlPort: Int
        /// Which environment this simulator plays (`apns-unique-id` is sent in development only).
        public var environment: APNsEnvironment
        /// Streams allowed per connection once it has authenticated (APNs: about 1000).
        public var maxConcurrentStreams: Int
        public var clock: @Sendable () -> Date
        /// The event loops the APNs side runs on (every stream is answered on them); nil: NIO's shared ones. A benchmark
        /// gives the simulator threads of its own to tell how much of the machine it used.
        public var eventLoopGroup: (any EventLoopGroup)?

        public init(
            host: String = "127.0.0.1", port: Int = 0, controlPort: Int = 0, environment: APNsEnvironment = .development,
            maxConcurrentStreams: Int = 1000, clock: @escaping @Sendable () -> Date = Date.init, eventLoopGroup: (any EventLoopGroup)? = nil
        ) {
            self.host = host
            self.port = port
            self.controlPort = controlPort
            self.environment = environment
            self.maxConcurrentStreams = maxConcurrentStreams
            self.clock = clock
            self.eventLoopGroup = eventLoopGroup
        }
    }

    /// Where a running simulator listens.
    public struct Endpoints: Sendable, Codable, Hashable {
        public var apnsURL: String
        public var controlURL: String
        public var apnsPort: Int
        public var controlPort: Int
    }

    public let configuration: Configuration
    /// The PEM of the CA that signed the simulator's TLS certificate: clients must trust it.
    public let caPEM: String
    let state: SimulatorState
    private let logger: Logger
    private let ready = Mutex<(endpoints: Endpoints?, waiters: [CheckedContinuation<Endpoints, Never>])>((nil, []))

    public init(configuration: Configuration = Configuration(), logger: Logger = Logger(label: "beacon.apns-sim")) throws {
        self.configuration = configuration
        self.logger = logger
        let pki = try SimulatorPKI.generate(now: configuration.clock())
        caPEM = pki.caPEM
        state = try SimulatorState(pki: pki)
    }

    /// Waits until both ports are bound.
    public func endpoints() async -> Endpoints {
        await withCheckedContinuation { continuation in
            let known = ready.withLock { ready -> Endpoints? in
                if let endpoints = ready.endpoints { return endpoints }
                ready.waiters.append(continuation)
                return nil
            }
            if let known { continuation.resume(returning: known) }
        }
    }

    public func run() async throws {
        let listener = APNsListener(
            state: state, environment: configuration.environment, maxConcurrentStreams: configuration.maxConcurrentStreams,
            clock: configuration.clock, logger: logger)
        let channel = try await listener.bind(
            host: configuration.host, port: configuration.port, group: configuration.eventLoopGroup ?? MultiThreadedEventLoopGroup.singleton
        )
        let apnsPort = channel.localAddress?.port ?? 0
        let (controlPorts, controlPortSink) = AsyncStream.makeStream(of: Int.self)
        let control = Application(
            router: ControlAPI(simulator: self).router(),
            configuration: .init(address: .hostname(configuration.host, port: configuration.controlPort), serverName: "beacon-apns-sim"),
            onServerRunning: { controlPortSink.yield($0.localAddress?.port ?? 0) },
            logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await control.run() }
            group.addTask {
                var ports = controlPorts.makeAsyncIterator()
                let controlPort = await ports.next() ?? 0
                let host = self.configuration.host.contains(":") ? "[\(self.configuration.host)]" : self.configuration.host
                let endpoints = Endpoints(
                    apnsURL: "https://\(host):\(apnsPort)", controlURL: "http://\(host):\(controlPort)", apnsPort: apnsPort,
                    controlPort: controlPort)
                let waiters = self.ready.withLock { ready in
                    ready.endpoints = endpoints
                    defer { ready.waiters.removeAll() }
                    return ready.waiters
                }
                for waiter in waiters { waiter.resume(returning: endpoints) }
            }
            // The control API stops by itself on graceful shutdown (or cancellation).
            try await group.waitForAll()
        }
        try? await channel.close()
    }

    // MARK: Control (also reachable over the control API)

    /// Trusts `.p8` tokens signed by this key (`kid` = `keyID`, `iss` = `teamID`).
    public func registerKey(teamID: String, keyID: String, publicKeyPEM: String) throws {
        try state.registerKey(teamID: teamID, keyID: keyID, publicKeyPEM: publicKeyPEM)
    }

    /// Trusts client certificates issued by this CA for `topics` (bundle ids; the push-type suffixes follow).
    public func registerCertificateAuthority(pem: String, topics: [String], environment: APNsEnvironment? = nil) throws {
        try state.registerAuthority(pem: pem, topics: topics, environment: environment)
    }

    /// Answers 410 `Unregistered` with `timestamp` (ms) for this device token from now on.
    public func markUnregistered(deviceToken: String, timestamp: Int64) {
        state.data.withLock { $0.unregistered[deviceToken.lowercased()] = timestamp }
    }

    /// Ties a device token to an app's topic (and environment) and to its kind, as iOS issues them: a PushKit token
    /// (`topic` ending in `.voip`) takes VoIP pushes only, any other token everything but VoIP. Pushes that do not
    /// match get `DeviceTokenNotForTopic` (`BadDeviceToken` for the other environment).
    public func registerDeviceToken(_ deviceToken: String, topic: String, environment: APNsEnvironment? = nil) {
        let voipSuffix = APNsPushType.voip.topicSuffix
        let voip = topic.hasSuffix(voipSuffix)
        let bundle = voip ? String(topic.dropLast(voipSuffix.count)) : topic
        state.data.withLock {
            $0.tokenTopics[deviceToken.lowercased()] = RegisteredToken(topic: bundle, environment: environment, voip: voip)
        }
    }

    /// Replaces the injected faults.
    public func setFaults(_ faults: SimulatorFaults) {
        state.data.withLock { data in
            data.faults = faults
            data.failuresLeft = faults.failCount
            data.recentByToken = [:]
            if faults.stall == true { data.stallGeneration += 1 }
        }
    }

    /// Requests read so far, answered or not (faults included).
    public var requestsReceived: Int { state.data.withLock { $0.requestsReceived } }

    /// Accepted notifications, oldest first, optionally for one device token.
    public func deliveries(deviceToken: String? = nil) -> [SimulatedDelivery] {
        state.data.withLock { data in
            guard let deviceToken else { return data.deliveries }
            return data.deliveries.filter { $0.deviceToken.lowercased() == deviceToken.lowercased() }
        }
    }

    public func clearDeliveries() {
        state.data.withLock { $0.deliveries.removeAll() }
    }
}
