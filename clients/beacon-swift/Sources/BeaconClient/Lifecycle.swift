import Foundation

/// The app's life: background, foreground, network changes (Tencent's `doBackground` / `doForeground`).
extension BeaconClient {
    /// The app went to the background. Reports `badge` (the unread count it shows), if given, so that the badges of
    /// later pushes count on from it; then, after `BeaconOptions.backgroundGrace`, closes the connection, so that the
    /// server pushes from then on instead of waiting for the connection to time out. The user stays logged in.
    public func applicationDidEnterBackground(badge: Int? = nil) async {
        inBackground = true
        closeAfterBackgroundGrace()
        if let badge, token != nil {
            do {
                try await reportBadge(badge)
            } catch {
                logger.warning("reporting the badge failed", metadata: ["error": "\(error)"])
            }
        }
    }

    /// The app is coming back to the foreground: reconnects (the connection then syncs what arrived meanwhile), unless the
    /// background grace has not passed yet, in which case the connection simply stays.
    public func applicationWillEnterForeground() {
        inBackground = false
        backgroundClose?.cancel()
        backgroundClose = nil
        guard token != nil, connectionTask == nil else { return }
        startConnection()
    }

    /// The network may be back (a path monitor saw it, or the app knows): a reconnect waiting out its backoff goes now.
    public func networkDidBecomeAvailable() {
        reconnectWait?.cancel()
    }

    /// Closes the connection after `backgroundGrace`, unless the app comes back first.
    func closeAfterBackgroundGrace() {
        backgroundClose?.cancel()
        backgroundClose = Task { [grace = options.backgroundGrace.bounded(below: .zero)] in
            guard (try? await Task.sleep(for: grace)) != nil else { return }  // cancelled: back in the foreground
            await self.closeForBackground()
        }
    }

    private func closeForBackground() async {
        guard inBackground, connectionTask != nil else { return }
        // Everything is decided before waiting for the loop's end: a foreground meanwhile starts a loop of its own.
        let task = stopConnection()
        failWaitingForConnection(with: .disconnected)
        if token != nil { enter(.suspended) }
        await task?.value
    }
}

#if canImport(UIKit) && os(iOS)
    import UIKit

    extension BeaconClient {
        /// Calls `applicationDidEnterBackground(badge:)` and `applicationWillEnterForeground()` as UIKit posts its
        /// notifications, until the returned object is released; `badge` gives the unread count to report (nil: none).
        @MainActor
        public func observeApplicationLifecycle(badge: @escaping @MainActor @Sendable () -> Int? = { nil }) -> AnyObject {
            LifecycleObserver(client: self, badge: badge)
        }
    }

    /// Holds UIKit's observer tokens; removes them when released.
    private final class LifecycleObserver {
        private let tokens: [any NSObjectProtocol]

        @MainActor
        init(client: BeaconClient, badge: @escaping @MainActor @Sendable () -> Int?) {
            let center = NotificationCenter.default
            // Posted on the main thread, and the blocks run on the main queue.
            tokens = [
                center.addObserver(forName: UIApplication.didEnterBackgroundNotification, object: nil, queue: .main) { _ in
                    let count = MainActor.assumeIsolated { badge() }
                    Task { await client.applicationDidEnterBackground(badge: count) }
                },
                center.addObserver(forName: UIApplication.willEnterForegroundNotification, object: nil, queue: .main) { _ in
                    Task { await client.applicationWillEnterForeground() }
                },
            ]
        }

        deinit {
            for token in tokens { NotificationCenter.default.removeObserver(token) }
        }
    }
#endif

#if canImport(Network)
    import Network

    extension BeaconClient {
        /// Calls `networkDidBecomeAvailable()` whenever the system's network path becomes usable, until the returned
        /// monitor is cancelled.
        public nonisolated func observeNetworkChanges() -> NWPathMonitor {
            let monitor = NWPathMonitor()
            monitor.pathUpdateHandler = { [weak self] path in
                guard path.status == .satisfied, let self else { return }
                Task { await self.networkDidBecomeAvailable() }
            }
            monitor.start(queue: DispatchQueue(label: "beacon.client.network"))
            return monitor
        }
    }
#endif
