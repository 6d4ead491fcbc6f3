#if canImport(UserNotifications) && (os(iOS) || os(macOS))  // tvOS and watchOS lack parts of it
    import Foundation
    import UserNotifications

    /// What a Notification Service Extension does with Beacon's pushes: attaches the image a sender asked for
    /// (`MessagePushOptions.imageURL`, Easemob's `em_push_image`, Tencent's `ApnsInfo.Image`). Beacon sets
    /// `mutable-content` on those pushes, so iOS runs the extension for them.
    ///
    /// ```swift
    /// override func didReceive(_ request: UNNotificationRequest, withContentHandler contentHandler: @escaping (UNNotificationContent) -> Void) {
    ///     Task { contentHandler(await NotificationServiceHelper.content(for: request)) }
    /// }
    /// ```
    @available(iOS 16.0, macOS 13.0, *)
    public enum NotificationServiceHelper {
        /// The notification to show: `request`'s content with the payload's image attached when it could be downloaded
        /// within `timeout` (iOS gives an extension about 30 seconds); the content unchanged otherwise.
        public static func content(
            for request: UNNotificationRequest, session: URLSession = .shared, timeout: Duration = .seconds(20)
        ) async -> UNNotificationContent {
            guard let payload = try? PushPayload(userInfo: request.content.userInfo),
                let image = payload.imageURL.flatMap(URL.init(string:)), image.scheme == "https",
                let content = request.content.mutableCopy() as? UNMutableNotificationContent,
                let attachment = await attachment(from: image, session: session, timeout: timeout)
            else { return request.content }
            content.attachments = [attachment]
            return content
        }

        /// Downloads `url` into a file named with the type's extension (which is how UserNotifications tells the type).
        private static func attachment(from url: URL, session: URLSession, timeout: Duration) async -> UNNotificationAttachment? {
            let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
            let request = URLRequest(url: url, cachePolicy: .useProtocolCachePolicy, timeoutInterval: seconds)
            do {
                // `timeoutInterval` bounds the silences only: the whole download is bounded by cancelling it.
                let download = Task { try await session.download(for: request) }
                let deadline = Task {
                    try await Task.sleep(for: timeout)
                    download.cancel()
                }
                defer { deadline.cancel() }
                let (downloaded, response) = try await download.value
                guard let status = (response as? HTTPURLResponse)?.statusCode, (200..<300).contains(status) else { return nil }
                let name = response.suggestedFilename ?? url.lastPathComponent
                let file = FileManager.default.temporaryDirectory.appendingPathComponent(UUID().uuidString)
                    .appendingPathExtension((name as NSString).pathExtension)
                try FileManager.default.moveItem(at: downloaded, to: file)
                return try UNNotificationAttachment(identifier: "image", url: file)
            } catch {
                return nil
            }
        }
    }
#endif
