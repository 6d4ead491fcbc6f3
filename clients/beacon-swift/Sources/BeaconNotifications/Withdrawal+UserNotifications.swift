#if canImport(UserNotifications) && (os(iOS) || os(macOS))  // tvOS and watchOS lack parts of it
    import UserNotifications

    extension PushPayload.Withdrawal {
        /// Removes the delivered notifications of messages now read or recalled and sets the app's badge: what the app does with
        /// Beacon's background push (`application(_:didReceiveRemoteNotification:fetchCompletionHandler:)`).
        @available(iOS 16.0, macOS 13.0, *)
        public func apply(to center: UNUserNotificationCenter = .current()) async {
            let delivered = await center.deliveredNotifications()
            let read = delivered.filter { notification in
                (try? PushPayload(userInfo: notification.request.content.userInfo)).map(covers) ?? false
            }
            center.removeDeliveredNotifications(withIdentifiers: read.map(\.request.identifier))
            try? await center.setBadgeCount(badge)
        }
    }
#endif
