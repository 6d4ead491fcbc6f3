/// Builds APNs payloads. Pure: the same inputs always give the same bytes.
public enum PushPayload {
    /// The SimpleBanner payload of SPEC §4: a fixed body, the badge, the default sound, and Easemob's custom keys
    /// `f` (from), `t` (to), `g` (group id, group messages only) and `m` (message id).
    public static func simpleBanner(for message: Message, receiver: String, badge: Int, body: String = "You have a new message") -> String {
        var payload: [String: JSONValue] = [
            "aps": ["alert": ["body": .string(body)], "badge": .number(Double(badge)), "sound": "default"],
            "f": .string(message.from),
            "t": .string(receiver),
            "m": .string(String(message.id)),
        ]
        if message.chatType == .groupchat { payload["g"] = .string(message.to) }
        return encode(.object(payload))
    }

    /// Compact JSON with sorted keys.
    public static func encode(_ value: JSONValue) -> String {
        JSONWriter.string(value)
    }
}
