import BeaconCore
import BeaconProtocol
import Foundation
import HTTPTypes
import HummingbirdWSClient
import Logging
import Synchronization

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
        private let reference = Mutex(Reference())
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
            await next(isolation: nil)
        }

        public mutating func next(isolation actor: isolated (any Actor)?) async -> Message? {
            if let taken = handedOut {
                handedOut = nil
                await owner.client?.taken(taken.seq, session: taken.session)
            }
            guard let delivery = await deliveries.next(isolation: actor) else { return nil }
            handedOut = delivery.seq.map { ($0, delivery.session) }
            return delivery.message
        }
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(deliveries: deliveries.makeAsyncIterator(), owner: owner)
    }
}
