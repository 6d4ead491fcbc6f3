import BeaconCore
import BeaconProtocol
import BeaconTesting
import Foundation
import HummingbirdWSClient
import Logging
import NIOCore
import NIOPosix
import NIOWebSocket
import Testing

@testable import BeaconServer

/// The WebSocket protocol of a device's socket (`DeviceSocketHandler`), from outside: fragments, control frames, the
/// close handshake and the server's pings.
@Suite struct DeviceSocketTests {
    static let send = #"{"op":"send","id":"f1","to":"bob","chat_type":"chat","type":"txt","body":{"msg":"joined"}}"#

    @Test func aMessageInFragmentsWithAPingBetweenIsJoinedAndHandled() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice", "bob")
            let bytes = Array(Self.send.utf8)
            let third = bytes.count / 3
            let answers = try await exchange(beacon, device: "fragments") { outbound in
                try await outbound.write(.custom(WebSocketFrame(fin: false, opcode: .text, data: ByteBuffer(bytes: bytes[..<third]))))
                try await outbound.write(.custom(WebSocketFrame(fin: true, opcode: .ping, data: ByteBuffer(string: "between"))))
                try await outbound.write(
                    .custom(WebSocketFrame(fin: false, opcode: .continuation, data: ByteBuffer(bytes: bytes[third..<2 * third]))))
                try await outbound.write(
                    .custom(WebSocketFrame(fin: true, opcode: .continuation, data: ByteBuffer(bytes: bytes[(2 * third)...]))))
            }
            #expect(answers.contains { if case .sent("f1", _, _) = $0 { true } else { false } }, "\(answers)")
            let bob = try await RawDevice.connect(beacon, "bob", device: "phone")
            #expect(bob.stored.map(\.text) == ["joined"])
            try await bob.close()
        }
    }

    @Test func fragmentsBeyondTheLimitCloseOnlyTheirConnectionWithMessageTooLarge() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice")
            let half = ByteBuffer(repeating: UInt8(ascii: "x"), count: DeviceSession.maxFrameBytes / 2 + 1)
            let close = try await closeFrame(beacon) { outbound in
                try await outbound.write(.custom(WebSocketFrame(fin: false, opcode: .text, data: half)))
                try await outbound.write(.custom(WebSocketFrame(fin: true, opcode: .continuation, data: half)))
            }
            #expect(close?.closeCode == .messageTooLarge)
            #expect(try await beacon.rest("GET", "/users/alice").status == 200)
        }
    }

    @Test func fragmentsOutOfOrderCloseWithProtocolError() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice")
            let part = ByteBuffer(string: "{")
            let orphan = try await closeFrame(beacon) { outbound in
                try await outbound.write(.custom(WebSocketFrame(fin: true, opcode: .continuation, data: part)))
            }
            #expect(orphan?.closeCode == .protocolError)
            let interrupted = try await closeFrame(beacon) { outbound in
                try await outbound.write(.custom(WebSocketFrame(fin: false, opcode: .text, data: part)))
                try await outbound.write(.custom(WebSocketFrame(fin: true, opcode: .text, data: part)))
            }
            #expect(interrupted?.closeCode == .protocolError)
        }
    }

    @Test func aDeviceThatStopsAnsweringPingsIsCutOffAndGoesOffline() async throws {
        var hooks = BeaconHooks()
        hooks.webSocketPingInterval = .milliseconds(200)
        try await TestBeacon.run(hooks: hooks) { beacon in
            try await beacon.createUsers("alice")
            let token = try await beacon.userToken("alice")
            let received = try await Self.silentDevice(port: beacon.port, path: "/acme/chat/ws?device_id=mute&access_token=\(token)")
            let frames = try #require(Self.serverFrames(in: received), "\(String(decoding: received, as: UTF8.self))")
            #expect(frames.contains { $0.opcode == 0x9 }, "pinged: \(frames.map(\.opcode))")
            let last = try #require(frames.last)
            #expect(last.opcode == 0x8 && Array(last.payload.prefix(2)) == [0x03, 0xE9], "closed with going away (1001): \(last)")
            try await waitUntil("alice's device offline") { try await beacon.presence.onlineDevices(of: ["alice"], app: 1).isEmpty }
        }
    }

    @Test func unsolicitedPongsDoNotKeepADeviceThatNeverAnswersPingsConnected() async throws {
        var hooks = BeaconHooks()
        hooks.webSocketPingInterval = .milliseconds(200)
        try await TestBeacon.run(hooks: hooks) { beacon in
            try await beacon.createUsers("alice")
            let token = try await beacon.userToken("alice")
            let received = try await Self.silentDevice(
                port: beacon.port, path: "/acme/chat/ws?device_id=mute&access_token=\(token)", then: .pongEvery(.milliseconds(50)))
            let last = try #require(Self.serverFrames(in: received)?.last)
            #expect(last.opcode == 0x8 && Array(last.payload.prefix(2)) == [0x03, 0xE9], "closed with going away (1001): \(last)")
        }
    }

    @Test func aDeviceThatClosesItsSideWithoutACloseFrameGoesOffline() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice")
            let token = try await beacon.userToken("alice")
            // With the server's pings 30 s apart, the connection ends within the bound only if the FIN ends it.
            let received = try await Self.silentDevice(
                port: beacon.port, path: "/acme/chat/ws?device_id=fin&access_token=\(token)", then: .closeOutput)
            #expect(Self.serverFrames(in: received) != nil)
            try await waitUntil("alice's device offline") { try await beacon.presence.onlineDevices(of: ["alice"], app: 1).isEmpty }
        }
    }

    @Test func whatADeviceSentBeforeItsCloseIsHandled() async throws {
        try await TestBeacon.run { beacon in
            try await beacon.createUsers("alice", "bob")
            let alice = try await RawDevice.connect(beacon, "alice", device: "phone")
            for index in 1...5 {
                alice.send(#"{"op":"send","id":"s\#(index)","to":"bob","chat_type":"chat","type":"txt","body":{"msg":"m\#(index)"}}"#)
            }
            try await alice.close()
            let bob = try await RawDevice.connect(beacon, "bob", device: "phone")
            #expect(bob.stored.map(\.text) == ["m1", "m2", "m3", "m4", "m5"])
            try await bob.close()
        }
    }

    /// What a bare device does once its upgrade is sent.
    enum SilentDevice {
        /// Nothing.
        case nothing
        /// Sends unsolicited pongs (a heartbeat RFC 6455 allows), never answering the server's pings.
        case pongEvery(Duration)
        /// Closes its side of the TCP connection at once (a FIN, no close frame).
        case closeOutput
    }

    /// Opens a WebSocket to `path` over a bare TCP connection that answers nothing and does `then`, and returns every
    /// byte the server sent until it closed the connection (at most 20 s).
    static func silentDevice(port: Int, path: String, then: SilentDevice = .nothing) async throws -> [UInt8] {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(host: "127.0.0.1", port: port) {
            channel in
            channel.eventLoop.makeCompletedFuture { try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel) }
        }
        return try await withTimeout(.seconds(20)) {
            try await channel.executeThenClose { inbound, outbound in
                try await outbound.write(
                    ByteBuffer(
                        string: "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                            + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"))
                switch then {
                case .nothing: break
                case .closeOutput: try await channel.channel.close(mode: .output)
                case .pongEvery(let interval):
                    Task {
                        // An unmasked pong frame with no payload; stops when the connection is gone.
                        while (try? await outbound.write(ByteBuffer(bytes: [0x8A, 0x00]))) != nil {
                            try? await Task.sleep(for: interval)
                        }
                    }
                }
                var received: [UInt8] = []
                for try await buffer in inbound { received += buffer.readableBytesView }
                return received
            }
        }
    }

    /// The frames after a 101 answer (unmasked, as a server sends them); nil when the upgrade was not answered 101.
    static func serverFrames(in bytes: [UInt8]) -> [(opcode: UInt8, payload: [UInt8])]? {
        let separator = Array("\r\n\r\n".utf8)
        guard bytes.starts(with: Array("HTTP/1.1 101".utf8)),
            let end = (0...(bytes.count - separator.count)).first(where: { Array(bytes[$0..<$0 + separator.count]) == separator })
        else { return nil }
        var frames: [(UInt8, [UInt8])] = []
        var index = end + separator.count
        while index + 2 <= bytes.count {
            var length = Int(bytes[index + 1] & 0x7F)
            var start = index + 2
            if length == 126, start + 2 <= bytes.count {
                length = Int(bytes[start]) << 8 | Int(bytes[start + 1])
                start += 2
            } else if length == 127 {
                return nil  // nothing this large is sent here
            }
            guard start + length <= bytes.count else { return nil }
            frames.append((bytes[index] & 0x0F, Array(bytes[start..<start + length])))
            index = start + length
        }
        return frames
    }
}

/// A device's close is answered once it has gone offline (its presence row removed), however slow the database.
@Suite(.enabled(if: ProcessInfo.processInfo.environment["BEACON_TEST_POSTGRES_URL"] != nil, "needs BEACON_TEST_POSTGRES_URL"))
struct DeviceCloseTests {
    @Test func aDeviceIsOfflineOnceItsCloseIsAnswered() async throws {
        let removals = Locked(0)
        var hooks = BeaconHooks()
        hooks.beforePresenceRemoval = { _, device in
            guard device == "phone" else { return }
            // A slow database: the device's close must not be answered before its presence is gone.
            try await Task.sleep(for: .milliseconds(300))
            removals.withLock { $0 += 1 }
        }
        try await TestBeacon.runNodes(1, hooks: hooks) { nodes in
            let beacon = nodes[0]
            try await beacon.createUsers("alice")
            for round in 1...3 {
                let device = try await RawDevice.connect(beacon, "alice", device: "phone")
                try await device.close()
                #expect(removals.withLock { $0 } == round)
                #expect(try await beacon.presence.onlineDevices(of: ["alice"], app: 1).isEmpty, "round \(round)")
            }
        }
    }
}

/// Writes frames on a fresh device connection of alice, then collects what the server answers until a `sent` or an
/// `error` (at most 20 s).
private func exchange(
    _ beacon: TestBeacon, device: String, _ write: @escaping @Sendable (WebSocketOutboundWriter) async throws -> Void
) async throws -> [ServerFrame] {
    let token = try await beacon.userToken("alice")
    let url = "ws://127.0.0.1:\(beacon.port)/acme/chat/ws?device_id=\(device)&access_token=\(token)"
    let answers = Locked<[ServerFrame]>([])
    try await withTimeout(.seconds(20)) {
        _ = try await WebSocketClient.connect(url: url, logger: Logger(label: "test")) { inbound, outbound, _ in
            try await write(outbound)
            for try await message in inbound.messages(maxSize: 1 << 20) {
                guard case .text(let text) = message, let frame = try? JSONDecoder().decode(ServerFrame.self, from: Data(text.utf8)) else {
                    continue
                }
                answers.withLock { $0.append(frame) }
                if case .sent = frame { break }
                if case .error = frame { break }
            }
            try await outbound.close(.normalClosure, reason: nil)
        }
    }
    return answers.withLock { $0 }
}

/// Writes frames on a fresh device connection of alice and returns how the server closed it (at most 20 s).
private func closeFrame(
    _ beacon: TestBeacon, _ write: @escaping @Sendable (WebSocketOutboundWriter) async throws -> Void
) async throws -> WebSocketCloseFrame? {
    let token = try await beacon.userToken("alice")
    let url = "ws://127.0.0.1:\(beacon.port)/acme/chat/ws?device_id=close&access_token=\(token)"
    return try await withTimeout(.seconds(20)) {
        try await WebSocketClient.connect(url: url, configuration: .init(maxFrameSize: 1 << 20), logger: Logger(label: "test")) {
            inbound, outbound, _ in
            try await write(outbound)
            for try await _ in inbound.messages(maxSize: 1 << 20) {}
        }
    }
}
