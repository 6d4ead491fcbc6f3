import BeaconCore
import BeaconProtocol
import Foundation

/// `BeaconClient.messages`: the messages for this device, in order. Iterate it from one task. Asking for the next
/// message tells the client that the app finished with the previous one, which is then acknowledged to the server.
public struct MessageStream: AsyncSequence, Sendable {
    public typealias Element = Message
    public typealias Failure = Never

    struct Delivery: Sendable {
        var message: Message
        /// Stored messages have one; they are acknowledged once taken.
        var seq: Int64?
        /// The login it arrived in.
        var session: Int
    }

    /// Points back at the client without keeping it alive.
    final class Owner: Sendable {
        private struct Reference: @unchecked Sendable {  // BeaconClient is an actor: sendable; the box only holds it weakly
            weak var client: BeaconClient?
        }
        private let reference = Locked(Reference())
        func attach(_ client: BeaconClient) { reference.withLock { $0.client = client } }
        var client: BeaconClient? { reference.withLock { $0.client } }
    }

    let deliveries: AsyncStream<Delivery>
    let owner = Owner()

    public struct AsyncIterator: AsyncIteratorProtocol {
        var deliveries: AsyncStream<Delivery>.AsyncIterator
        let owner: Owner
        /// The stored message handed out last, not yet reported as taken.
        var handedOut: (seq: Int64, session: Int)?

        public mutating func next() async -> Message? {
            await Self.report(taken(), to: owner)
            return handOut(await deliveries.next())
        }

        /// `next()` on the caller's actor (AsyncStream's own form is there from iOS 18 and macOS 15).
        @available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, *)
        public mutating func next(isolation actor: isolated (any Actor)?) async -> Message? {
            await Self.report(taken(), to: owner)
            return handOut(await deliveries.next(isolation: actor))
        }

        /// Asking for the next message means the app finished with the one handed out before.
        private mutating func taken() -> (seq: Int64, session: Int)? {
            defer { handedOut = nil }
            return handedOut
        }

        private static func report(_ taken: (seq: Int64, session: Int)?, to owner: Owner) async {
            guard let taken else { return }
            await owner.client?.taken(taken.seq, session: taken.session)
        }

        private mutating func handOut(_ delivery: Delivery?) -> Message? {
            guard let delivery else { return nil }
            handedOut = delivery.seq.map { ($0, delivery.session) }
            return delivery.message
        }
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(deliveries: deliveries.makeAsyncIterator(), owner: owner)
    }
}
