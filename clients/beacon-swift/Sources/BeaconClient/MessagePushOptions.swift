import BeaconCore

/// How a message's receivers are notified, typed: what Easemob's senders put in `ext` by hand (`em_apns_ext`,
/// `em_push_template`, `em_force_notification`, `em_ignore_notification`). Unset fields leave the receiver's own
/// settings and the app's templates in charge.
public struct MessagePushOptions: Sendable, Hashable {
    /// A template of the app's (`PUT /push/template`) and the values of its `{0}`, `{1}`… placeholders.
    public struct Template: Sendable, Hashable {
        public var name: String
        public var titleArguments: [String]
        public var contentArguments: [String]

        public init(name: String, titleArguments: [String] = [], contentArguments: [String] = []) {
            self.name = name
            self.titleArguments = titleArguments
            self.contentArguments = contentArguments
        }
    }

    public var title: String?
    public var subtitle: String?
    /// The notification's text instead of the message's.
    public var content: String?
    /// A sound file of the app's bundle (`default` when unset).
    public var sound: String?
    /// The category whose actions the notification shows.
    public var category: String?
    /// Notifications with the same key replace each other on the device (`apns-collapse-id`, at most 64 bytes).
    public var collapseKey: String?
    /// The badge to show, instead of the receiver's unread count.
    public var badge: Int?
    /// An image a notification service extension downloads and attaches (sets `mutable-content`).
    public var imageURL: String?
    /// Lets a notification service extension change the notification before it shows.
    public var mutableContent: Bool
    /// Notify even through the receiver's do-not-disturb.
    public var force: Bool
    /// Store and deliver the message, but notify no one.
    public var silent: Bool
    public var template: Template?
    /// Localized title and text from the app's `Localizable.strings`, with their arguments.
    public var titleLocKey: String?
    public var titleLocArguments: [String]
    public var locKey: String?
    public var locArguments: [String]
    /// Custom content the receiving app reads as `PushPayload.extra`.
    public var extra: JSONValue?

    public init(
        title: String? = nil, subtitle: String? = nil, content: String? = nil, sound: String? = nil, category: String? = nil,
        collapseKey: String? = nil, badge: Int? = nil, imageURL: String? = nil, mutableContent: Bool = false, force: Bool = false,
        silent: Bool = false, template: Template? = nil, titleLocKey: String? = nil, titleLocArguments: [String] = [],
        locKey: String? = nil, locArguments: [String] = [], extra: JSONValue? = nil
    ) {
        self.title = title
        self.subtitle = subtitle
        self.content = content
        self.sound = sound
        self.category = category
        self.collapseKey = collapseKey
        self.badge = badge
        self.imageURL = imageURL
        self.mutableContent = mutableContent
        self.force = force
        self.silent = silent
        self.template = template
        self.titleLocKey = titleLocKey
        self.titleLocArguments = titleLocArguments
        self.locKey = locKey
        self.locArguments = locArguments
        self.extra = extra
    }

    /// The `ext` keys these options stand for (empty when none is set).
    public var ext: [String: JSONValue] {
        func strings(_ values: [String]) -> JSONValue { .array(values.map(JSONValue.string)) }
        var apns: [String: JSONValue] = [:]
        apns["em_push_title"] = title.map(JSONValue.string)
        apns["em_alert_subTitle"] = subtitle.map(JSONValue.string)
        apns["em_push_content"] = content.map(JSONValue.string)
        apns["em_push_sound"] = sound.map(JSONValue.string)
        apns["em_push_category"] = category.map(JSONValue.string)
        apns["em_push_collapse_key"] = collapseKey.map(JSONValue.string)
        apns["em_push_badge"] = badge.map { .number(Double($0)) }
        apns["em_push_image"] = imageURL.map(JSONValue.string)
        if mutableContent { apns["em_push_mutable_content"] = true }
        apns["em_push_title_loc_key"] = titleLocKey.map(JSONValue.string)
        if !titleLocArguments.isEmpty { apns["em_push_title_loc_args"] = strings(titleLocArguments) }
        apns["em_push_body_loc_key"] = locKey.map(JSONValue.string)
        if !locArguments.isEmpty { apns["em_push_body_loc_args"] = strings(locArguments) }
        apns["extern"] = extra
        var ext: [String: JSONValue] = [:]
        if !apns.isEmpty { ext["em_apns_ext"] = .object(apns) }
        if let template {
            ext["em_push_template"] = [
                "name": .string(template.name), "title_args": strings(template.titleArguments),
                "content_args": strings(template.contentArguments),
            ]
        }
        if force { ext["em_force_notification"] = true }
        if silent { ext["em_ignore_notification"] = true }
        return ext
    }
}
