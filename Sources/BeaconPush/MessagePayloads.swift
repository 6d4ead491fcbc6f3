import BeaconCore

/// The payloads of one message for its many receivers, rendered once per kind of notification.
///
/// Receivers who see the same notification — same display style, language, chosen template, conversation, VoIP or not —
/// differ only in `t`, their username, which sorted keys put last in the JSON. The first such receiver's payload is
/// rendered in full; the others get it with their `t` written in its place. That is exactly what `PayloadBuilder.build`
/// would return for them as long as nothing had to be shortened to fit APNs' limit: a rendering that was shortened, or
/// that a longer username would push over the limit, is rendered in full again. Messages with a `directed_template`
/// (chosen per receiver) are always rendered in full.
///
/// For one message, with one app's display strings and templates: use a new value for each message.
public struct MessagePayloads {
    private struct Kind: Hashable {
        var style: DisplayStyle
        var language: String?
        var receiverTemplate: String?
        var allowsVoIP: Bool
        var senderNickname: String?
        var conversation: String
    }

    private struct Shared {
        /// The rendering's JSON up to `t`'s value: `…,"t":`.
        var head: String
        var rendering: PayloadBuilder.Rendering
    }

    private var shared: [Kind: Shared] = [:]
    /// The message the shared renderings belong to.
    private var messageID: UInt64?

    public init() {}

    /// `PayloadBuilder.build(input)`, rendered once per kind of notification.
    public mutating func build(_ input: PayloadInput) throws(BeaconError) -> BuiltPayload {
        if messageID != input.message.id {
            shared = [:]
            messageID = input.message.id
        }
        if input.message.ext["em_push_template"]?["directed_template"] != nil { return try PayloadBuilder.build(input) }
        let kind = Kind(
            style: input.style, language: input.language, receiverTemplate: input.receiverTemplate, allowsVoIP: input.allowsVoIP,
            senderNickname: input.senderNickname, conversation: input.message.conversation(for: input.receiver).key)
        if let shared = shared[kind], let payload = Self.splice(input.receiver, badge: input.badge, into: shared) { return payload }
        let rendering = try PayloadBuilder.render(input)
        let json = rendering.payload.withoutBadge
        var value = ""
        JSONWriter.writeString(input.receiver, to: &value)
        if !rendering.shortened, json.hasSuffix(#","t":"# + value + "}") {
            let head = String(decoding: json.utf8.dropLast(value.utf8.count + 1), as: UTF8.self)
            shared[kind] = Shared(head: head, rendering: rendering)
        }
        return rendering.payload
    }

    /// The shared rendering with `receiver` as its `t`, or nil when it would no longer fit unshortened.
    private static func splice(_ receiver: String, badge: Int, into shared: Shared) -> BuiltPayload? {
        var json = shared.head
        JSONWriter.writeString(receiver, to: &json)
        json += "}"
        guard json.utf8.count <= shared.rendering.fitLimit else { return nil }
        var payload = shared.rendering.payload
        payload.withoutBadge = json
        payload.badge = badge
        return payload
    }
}
