import BeaconClient
import BeaconProtocol
import Foundation
import Testing

/// The connection's life against a scripted server: reconnects, the heartbeat, background and foreground, network changes.
@Suite struct ConnectionLifeTests {
    let server = ScriptedServer()

    func client(
        heartbeat: Duration = .seconds(30), heartbeatTimeout: Duration = .seconds(10), reconnectDelay: Duration = .milliseconds(20),
        backgroundGrace: Duration = .milliseconds(50)
    ) -> BeaconClient {
        BeaconClient(
            options: BeaconOptions(
                appKey: "org#app", serverURL: URL(string: "http://beacon.test")!, storage: MemoryStorage(), loginTimeout: .seconds(10),
                reconnectDelay: reconnectDelay, maxReconnectDelay: reconnectDelay, heartbeatInterval: heartbeat,
                heartbeatTimeout: heartbeatTimeout, backgroundGrace: backgroundGrace, transport: server))
    }

    /// Logs `client` in, welcoming its first connection; returns that connection.
    func logIn(_ client: BeaconClient, _ connections: inout AsyncStream<ScriptedConnection>.Iterator) async throws -> ScriptedConnection {
        async let login: Void = client.login(token: "token", username: "ann")
        let first = try await next(&connections, "the first connection")
        first.welcome()
        try await login
        return first
    }

    @Test func aDroppedConnectionIsOpenedAgainWithoutANewLoginAndDeliversWhatCameMeanwhile() async throws {
        let client = client()
        var connections = server.connections.makeAsyncIterator()
        let first = try await logIn(client, &connections)
        #expect(first.headers["Authorization"] == "Bearer token")
        var messages = client.messages.makeAsyncIterator()

        first.drop()
        let second = try await next(&connections, "a second connection after the drop")
        #expect(second.headers["Authorization"] == "Bearer token")
        #expect(second.query("device_id") == first.query("device_id"))
        second.send(.welcome(username: "ann", deviceID: "phone", cursor: 0))
        second.send(
            .message(
                seq: 1,
                message: WireMessage(
                    Message(
                        id: 7, from: "bob", to: "ann", chatType: .chat, type: .txt, body: .object(["msg": .string("while away")]), ext: [:],
                        timestamp: 1))))
        second.send(.synced(seq: 1))
        let message = try #require(await messages.next())
        #expect(message.id == 7)
        // The login's REST calls, and no other: the reconnect reused the token.
        #expect(server.requests.filter { $0.hasPrefix("GET") }.count == 1)
        #expect(await client.state == .connected)
    }

    @Test func aServerRestartIsAClosedConnectionAndTheClientComesBack() async throws {
        let client = client()
        var connections = server.connections.makeAsyncIterator()
        let first = try await logIn(client, &connections)
        first.close()
        let second = try await next(&connections, "a connection after the server closed the first")
        second.welcome()
        var states = client.states.makeAsyncIterator()
        while try await next(&states, "connected again") != .connected {}
    }

    @Test func aHalfOpenConnectionIsFoundByTheHeartbeatAndReplaced() async throws {
        let client = client(heartbeat: .milliseconds(30), heartbeatTimeout: .milliseconds(500))
        var connections = server.connections.makeAsyncIterator()
        let first = try await logIn(client, &connections)
        var sent = first.fromClient.makeAsyncIterator()
        // The server answers the first pings: the connection stays.
        for _ in 0..<3 {
            while try await next(&sent, "a ping") != .ping {}
            first.send(.pong)
        }
        // Then it goes silent without closing (a half-open TCP connection): one more ping, then a new connection.
        while try await next(&sent, "the unanswered ping") != .ping {}
        var closed = first.closed.makeAsyncIterator()
        _ = await closed.next()
        let second = try await next(&connections, "a connection replacing the silent one")
        second.welcome()
    }

    @Test func aSlowServerThatAnswersWithinTheTimeoutKeepsItsConnection() async throws {
        let client = client(heartbeat: .milliseconds(20), heartbeatTimeout: .seconds(5))
        var connections = server.connections.makeAsyncIterator()
        let first = try await logIn(client, &connections)
        var sent = first.fromClient.makeAsyncIterator()
        for _ in 0..<3 {
            while try await next(&sent, "a ping") != .ping {}
            try await Task.sleep(for: .milliseconds(100))  // slower than the interval, within the timeout
            first.send(.pong)
        }
        // Had the client given up on it, its frames would have ended and a second connection been opened.
        while try await next(&sent, "a ping on the same connection") != .ping {}
        #expect(await client.state == .connected)
    }

    @Test func goingToTheBackgroundReportsTheBadgeAndClosesAfterTheGraceThenTheForegroundSyncs() async throws {
        let client = client()
        var connections = server.connections.makeAsyncIterator()
        let first = try await logIn(client, &connections)
        var states = client.states.makeAsyncIterator()

        await client.applicationDidEnterBackground(badge: 4)
        #expect(server.requests.contains("PUT /org/app/users/ann/push/badge"))
        var closed = first.closed.makeAsyncIterator()
        _ = await closed.next()
        while try await next(&states, "suspended") != .suspended {}

        await client.applicationWillEnterForeground()
        let second = try await next(&connections, "the connection after the foreground")
        second.welcome(cursor: 3)
        while try await next(&states, "connected again") != .connected {}
        // The user stayed logged in: no second login.
        #expect(server.requests.filter { $0.hasPrefix("GET") }.count == 1)
    }

    @Test func aForegroundWithinTheGraceKeepsTheConnection() async throws {
        let client = client(heartbeat: .milliseconds(20), heartbeatTimeout: .milliseconds(500), backgroundGrace: .milliseconds(300))
        var connections = server.connections.makeAsyncIterator()
        let first = try await logIn(client, &connections)
        var sent = first.fromClient.makeAsyncIterator()
        let clock = ContinuousClock()
        let start = clock.now
        await client.applicationDidEnterBackground()
        await client.applicationWillEnterForeground()
        // Pings answered until well past the grace: the same connection carries them (a closed one ends `sent`).
        while clock.now < start + .milliseconds(700) {
            while try await next(&sent, "a ping on the kept connection") != .ping {}
            first.send(.pong)
        }
        #expect(await client.state == .connected)
    }

    @Test func aNetworkChangeCutsTheReconnectWaitShort() async throws {
        let client = client(reconnectDelay: .seconds(3600))
        var connections = server.connections.makeAsyncIterator()
        let first = try await logIn(client, &connections)
        var states = client.states.makeAsyncIterator()
        first.drop()
        while try await next(&states, "waiting to reconnect") != .waitingToReconnect {}
        await client.networkDidBecomeAvailable()
        _ = try await next(&connections, "a connection at once, not after an hour")
    }

    @Test func logoutEndsTheStatesInLoggedOut() async throws {
        let client = client()
        var connections = server.connections.makeAsyncIterator()
        let first = try await logIn(client, &connections)
        var states = client.states.makeAsyncIterator()
        #expect(try await next(&states, "the state") == .connected)
        var sent = first.fromClient.makeAsyncIterator()
        async let logout: Void = client.logout()
        while try await next(&sent, "the logout frame") != .logout {}
        first.send(.closing(reason: "logout"))
        first.close()
        await logout
        while try await next(&states, "logged out") != .loggedOut {}
    }

    @Test func aLogoutWhileWaitingToReconnectEndsAtOnce() async throws {
        let client = client(reconnectDelay: .seconds(3600))
        var connections = server.connections.makeAsyncIterator()
        let first = try await logIn(client, &connections)
        var states = client.states.makeAsyncIterator()
        first.drop()
        while try await next(&states, "waiting to reconnect") != .waitingToReconnect {}
        // Before: logout waited out the whole reconnect delay.
        try await withBound("the logout") { await client.logout() }
        #expect(await client.state == .loggedOut)
    }

    @Test func sendingInTheBackgroundFailsAtOnceInsteadOfWaitingForTheForeground() async throws {
        let client = client()
        var connections = server.connections.makeAsyncIterator()
        let first = try await logIn(client, &connections)
        await client.applicationDidEnterBackground()
        var closed = first.closed.makeAsyncIterator()
        _ = await closed.next()
        try await withBound("the refused send") {
            await #expect(throws: BeaconClientError.disconnected) {
                try await client.send(OutgoingChatMessage(to: "bob", content: .text("from the lock screen")))
            }
        }
    }

    @Test func aForegroundDuringTheBackgroundCloseLeavesOneConnectedLoop() async throws {
        let client = client()
        var connections = server.connections.makeAsyncIterator()
        let first = try await logIn(client, &connections)
        await client.applicationDidEnterBackground()
        // The close has begun (the first connection is being torn down) when the app comes back.
        var closed = first.closed.makeAsyncIterator()
        _ = await closed.next()
        await client.applicationWillEnterForeground()
        let second = try await next(&connections, "the foreground's connection")
        second.welcome()
        var states = client.states.makeAsyncIterator()
        while try await next(&states, "connected") != .connected {}
        // A send goes through the second connection and is answered there.
        async let sent = client.send(OutgoingChatMessage(to: "bob", content: .text("back")))
        var frames = second.fromClient.makeAsyncIterator()
        guard case .send(let request) = try await next(&frames, "the send") else {
            Issue.record("not a send")
            return
        }
        second.send(.sent(id: request.id, messageID: "9", timestamp: 1))
        #expect(try await sent.id == 9)
        #expect(await client.state == .connected)
    }

    @Test func aReplacedConnectionEndsTheLoopAndTheForegroundStartsAgain() async throws {
        let client = client()
        var connections = server.connections.makeAsyncIterator()
        let first = try await logIn(client, &connections)
        var states = client.states.makeAsyncIterator()
        first.send(.closing(reason: "replaced"))
        first.close()
        while try await next(&states, "the end of the session") != .loggedOut {}
        try await withBound("the refused send") {
            await #expect(throws: BeaconClientError.disconnected) {
                try await client.send(OutgoingChatMessage(to: "bob", content: .text("x")))
            }
        }
        await client.applicationWillEnterForeground()
        _ = try await next(&connections, "a connection when the app comes back")
    }
}

/// Runs `body`, failing after `limit` instead of hanging.
func withBound(_ what: String, _ limit: Duration = .seconds(10), _ body: @escaping @Sendable () async throws -> Void) async throws {
    try await withThrowingTaskGroup(of: Bool.self) { group in
        group.addTask {
            try await body()
            return true
        }
        group.addTask {
            try? await Task.sleep(for: limit)
            return false
        }
        defer { group.cancelAll() }
        guard try await group.next() == true else { throw TimedOut(what: what) }
    }
}
