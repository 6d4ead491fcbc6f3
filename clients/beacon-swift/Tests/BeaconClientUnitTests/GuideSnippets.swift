// The Swift code of docs/ios.md, compiled with the SDK's tests (GuideSnippetTests checks that each block of the guide
// is here, line for line). Apple-only blocks compile where UIKit does.
import BeaconClient
import Foundation

#if canImport(UIKit) && canImport(PushKit) && canImport(UserNotifications)
    import PushKit
    import UIKit
    import UserNotifications
#endif

enum GuideSnippets {
    static func options() -> BeaconClient {
        // 3. Options: the app key and the push configuration's name from the console.
        let client = BeaconClient(
            options: BeaconOptions(
                appKey: "acme#chat", serverURL: URL(string: "https://chat.example.com")!, apnsCertName: "myapp-prod"))
        return client
    }

    static func login(_ client: BeaconClient) async throws {
        try await client.login(username: "alice", password: "secret")
        // or, moving from Tencent Cloud IM, with the UserSig your backend already makes:
        try await client.login(userID: "alice", userSig: "eJyrVgrxCdYrSy1SslIy0jNQ0gHzM1NS8…")
    }

    static func messaging(_ client: BeaconClient) async throws {
        Task {
            for await message in client.messages {
                print(message.from, message.content ?? "")
            }
        }
        try await client.send(OutgoingChatMessage(to: "bob", content: .text("hello")))
    }

    static func pushSettings(_ client: BeaconClient) async throws {
        try await client.updatePushDisplayName("Alice")
        try await client.updatePushDisplayStyle(1)  // 1: the message's text in the notification
        try await client.setSilentModeForAll(
            SilentModeParam(interval: SilentInterval(startHour: 22, startMinute: 0, endHour: 7, endMinute: 0)))
        try await client.setSilentModeForConversation("team", type: .groupchat, param: SilentModeParam(remindType: .mentionsOnly))
    }

    static func sendWithPushOptions(_ client: BeaconClient) async throws {
        let push = MessagePushOptions(
            title: "Alice", content: "sent you a photo", category: "REPLY", imageURL: "https://cdn.example.com/p/1.jpg")
        try await client.send(OutgoingChatMessage(to: "bob", content: .text("look!"), push: push))
    }

    static func lifeByHand(_ client: BeaconClient, unreadCount: Int) async {
        // When the app goes to the background (Tencent's doBackground):
        await client.applicationDidEnterBackground(badge: unreadCount)
        // When it comes back (doForeground):
        await client.applicationWillEnterForeground()
    }

    static func states(_ client: BeaconClient) {
        Task {
            for await state in client.states {
                print("connection:", state)  // loggedOut, connecting, connected, waitingToReconnect, suspended
            }
        }
    }

    static func unbind(_ client: BeaconClient) async throws {
        try await client.unbindDeviceToken()  // Tencent's setAPNS(nil): no more pushes, still logged in
    }

    #if canImport(UIKit) && canImport(PushKit) && canImport(UserNotifications)
        final class AppDelegate: UIResponder, UIApplicationDelegate {
            let client = GuideSnippets.options()
            var lifecycle: AnyObject?

            func application(
                _ application: UIApplication, didFinishLaunchingWithOptions launchOptions: [UIApplication.LaunchOptionsKey: Any]?
            ) -> Bool {
                application.registerForRemoteNotifications()
                lifecycle = client.observeApplicationLifecycle()
                return true
            }

            func application(_ application: UIApplication, didRegisterForRemoteNotificationsWithDeviceToken deviceToken: Data) {
                Task { try await client.registerForRemoteNotifications(deviceToken: deviceToken) }
            }

            func application(
                _ application: UIApplication, didReceiveRemoteNotification userInfo: [AnyHashable: Any],
                fetchCompletionHandler completionHandler: @escaping (UIBackgroundFetchResult) -> Void
            ) {
                guard let withdrawal = try? PushPayload(userInfo: userInfo).withdrawal else { return completionHandler(.noData) }
                Task {
                    await withdrawal.apply()  // removes what was read elsewhere or recalled; sets the badge
                    completionHandler(.newData)
                }
            }
        }

        final class CallDelegate: NSObject, PKPushRegistryDelegate {
            let client: BeaconClient
            init(client: BeaconClient) { self.client = client }

            func pushRegistry(_ registry: PKPushRegistry, didUpdate credentials: PKPushCredentials, for type: PKPushType) {
                Task { try await client.registerVoIPPushToken(credentials.token) }
            }

            func pushRegistry(
                _ registry: PKPushRegistry, didReceiveIncomingPushWith payload: PKPushPayload, for type: PKPushType,
                completion: @escaping () -> Void
            ) {
                // Report the call to CallKit here, as PushKit requires.
                completion()
            }
        }

        final class NotificationService: UNNotificationServiceExtension {
            override func didReceive(
                _ request: UNNotificationRequest, withContentHandler contentHandler: @escaping (UNNotificationContent) -> Void
            ) {
                Task { contentHandler(await NotificationServiceHelper.content(for: request)) }
            }
        }
    #endif
}
