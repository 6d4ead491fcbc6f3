import BeaconCore
import Foundation

/// How every store writes the parts of a message and a receipt that are JSON text, so that engines agree byte for byte.
public enum StoredForm {
    /// Each message's stored id with its body and ext as JSON text (done before any transaction starts).
    public static func encode(_ messages: [NewMessage]) throws -> [(new: NewMessage, id: Int64, body: String, ext: String)] {
        try messages.map { new in
            guard let id = new.message.id.storedID else { throw BeaconError(.internalError, "message id \(new.message.id) out of range") }
            return (new, id, JSONWriter.string(new.message.body), JSONWriter.string(.object(new.message.ext)))
        }
    }

    /// A message from its stored columns.
    public static func message(
        id: Int64, sender: String, recipient: String, chatType: String, type: String, body: String, ext: String, timestamp: Int64
    ) throws -> Message {
        guard let extFields = try JSONReader.value(of: ext).objectValue else {
            throw BeaconError(.internalError, "stored message \(id) has an ext that is not a JSON object")
        }
        guard let chatType = ChatType(rawValue: chatType), let type = MessageType(rawValue: type) else {
            throw BeaconError(.internalError, "stored message \(id) has chat type \(chatType) and type \(type), which no version writes")
        }
        return Message(
            id: UInt64(bitPattern: id), from: sender, to: recipient, chatType: chatType, type: type, body: try JSONReader.value(of: body),
            ext: extFields, timestamp: timestamp)
    }

    /// How a job's `apns-id` is stored: lowercase, or empty for none.
    public static func text(of apnsID: UUID?) -> String {
        apnsID.map { $0.uuidString.lowercased() } ?? ""
    }

    /// A push job's typed fields from their stored columns. A value no version of Beacon writes is an error (the read
    /// fails), never a default: a damaged row is not sent as something else.
    public static func pushFields(job: Int64, pushType: String, priority: Int, apnsID: String, status: String) throws -> (
        pushType: PushType, priority: PushPriority, apnsID: UUID?, status: PushJobStatus
    ) {
        guard let type = PushType(rawValue: pushType), let level = PushPriority(rawValue: priority),
            let status = PushJobStatus(rawValue: status)
        else {
            throw BeaconError(
                .internalError, "stored push job \(job) has push type \(pushType), priority \(priority), status \(status): not Beacon's")
        }
        let parsedID = UUID(uuidString: apnsID)
        guard apnsID.isEmpty || parsedID != nil else {
            throw BeaconError(.internalError, "stored push job \(job) has an apns-id that is not a UUID")
        }
        return (type, level, parsedID, status)
    }

    /// A stored job's payload: as stored (`payload`), or rebuilt from the content it refers to (`contentID`, whose
    /// `head` and `badgeOffset` were read with it) and its receiver's `badge` (`PushContents`). A job whose content is
    /// gone is an error (the read fails), never an empty push.
    public static func payload(
        job: Int64, stored payload: String, contentID: Int64?, head: String?, badgeOffset: Int64?, badge: Int64?, username: String
    ) throws -> String {
        guard contentID != nil else { return payload }
        guard let head else { throw BeaconError(.internalError, "stored push job \(job) refers to a push content that is gone") }
        return PushContents.payload(
            head: head, badgeOffset: badgeOffset.map { Int(truncatingIfNeeded: $0) }, badge: Int(clamping: badge ?? 0), username: username)
    }

    /// A receipt's answer (receiver → message id) as JSON text: the first message of each receiver.
    public static func receiptIDs(of messages: [NewMessage]) throws -> String {
        let ids = Dictionary(messages.map { ($0.message.to, String($0.message.id)) }, uniquingKeysWith: { first, _ in first })
        return String(decoding: try JSONEncoder().encode(ids), as: UTF8.self)
    }

    /// The answer stored by `receiptIDs(of:)`.
    public static func receiptIDs(from text: String) -> [String: UInt64] {
        let decoded = (try? JSONDecoder().decode([String: String].self, from: Data(text.utf8))) ?? [:]
        return decoded.compactMapValues { UInt64($0) }
    }
}
