import NIOCore
import NIOEmbedded
import Testing

@testable import BeaconAPNs

/// Records the flushes and closes that get past the handler under test (it sits where TLS would).
private final class OutboundRecorder: ChannelOutboundHandler {
    typealias OutboundIn = Any
    var events: [String] = []
    var flushes: Int { events.filter { $0 == "flush" }.count }

    func flush(context: ChannelHandlerContext) {
        events.append("flush")
        context.flush()
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        events.append("close")
        context.close(mode: mode, promise: promise)
    }
}

@Suite struct FlushCoalescingTests {
    @Test func theFlushesOfOneTurnLeaveAsOne() throws {
        let counter = OutboundRecorder()
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandlers([counter, FlushCoalescingHandler()])
        for text in ["a", "b", "c"] {
            channel.write(ByteBuffer(string: text), promise: nil)
            channel.flush()
        }
        #expect(counter.flushes == 0)
        #expect(try channel.readOutbound(as: ByteBuffer.self) == nil)  // waits for the turn's end
        channel.embeddedEventLoop.run()
        #expect(counter.flushes == 1)
        #expect(try channel.readOutbound(as: ByteBuffer.self) == ByteBuffer(string: "a"))
        #expect(try channel.readOutbound(as: ByteBuffer.self) == ByteBuffer(string: "b"))
        #expect(try channel.readOutbound(as: ByteBuffer.self) == ByteBuffer(string: "c"))
        _ = try? channel.finish()
    }

    /// What waits for the turn's flush (an HTTP/2 GOAWAY written just before a close) leaves before the close.
    @Test func aPendingFlushLeavesBeforeAClose() throws {
        let recorder = OutboundRecorder()
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandlers([recorder, FlushCoalescingHandler()])
        channel.write(ByteBuffer(string: "goaway"), promise: nil)
        channel.flush()
        channel.close(promise: nil)
        channel.embeddedEventLoop.run()
        #expect(recorder.events.prefix(2) == ["flush", "close"])  // (the turn's own flush comes after, and finds nothing)
    }
}
