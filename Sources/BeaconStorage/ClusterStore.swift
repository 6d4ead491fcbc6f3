/// One `beacon serve` process among several sharing a database.
public struct ClusterNode: Sendable, Hashable {
    /// Unique per process start (random): fences the node's push claims and names its mailbox and wake-up channel.
    public var epoch: Int64
    /// `--node-id`, or generated: for the people reading logs and tables.
    public var name: String
    /// 0..<1024, unique among live nodes: the node part of the message ids it makes.
    public var slot: UInt16

    public init(epoch: Int64, name: String, slot: UInt16) {
        self.epoch = epoch
        self.name = name
        self.slot = slot
    }
}

/// A device of a user within an app.
public struct DeviceKey: Sendable, Hashable {
    public var app: Int64
    public var username: String
    public var deviceID: String

    public init(app: Int64, username: String, deviceID: String) {
        self.app = app
        self.username = username
        self.deviceID = deviceID
    }
}

/// One WebSocket connection of a device: the node holding it and an id unique across the cluster.
public struct DeviceConnection: Sendable, Hashable {
    /// The epoch of the node holding it.
    public var node: Int64
    public var id: Int64
    /// When the device opened it (ms since 1970 on the database's clock): of two connections of one device, the later
    /// wins.
    public var openedAt: Int64

    public init(node: Int64, id: Int64, openedAt: Int64) {
        self.node = node
        self.id = id
        self.openedAt = openedAt
    }
}

/// What recording a device's connection did.
public enum ConnectOutcome: Sendable, Hashable {
    /// The connection is the device's current one; it replaced this earlier one, if any.
    case connected(replacing: DeviceConnection?)
    /// A later connection of the device is already recorded (this one registered late): this one must close.
    case superseded(by: DeviceConnection)
    /// The node is not (or no longer) a live member of the cluster: it must not take connections.
    case nodeGone
}

/// A note for one node (its body is the server's business: JSON): posted to its mailbox, or carried by a notification on
/// its channel (`ClusterStore.notify`).
public struct Letter: Sendable, Hashable {
    /// The epoch of the node it is for.
    public var node: Int64
    public var body: String

    /// A notification carries a body of fewer UTF-8 bytes than this (PostgreSQL's limit with its default 8 KiB pages).
    public static let notificationLimit = 8000

    public init(node: Int64, body: String) {
        self.node = node
        self.body = body
    }

    /// A notification with no body: it only tells the node that its mailbox has letters.
    public static func wakeup(_ node: Int64) -> Letter { Letter(node: node, body: "") }

    /// Whether a notification can carry the body.
    public var fitsInANotification: Bool { body.utf8.count < Self.notificationLimit }
}

/// What arrives on the channel a node listens on, in the order the notifications' transactions committed.
public enum NodeSignal: Sendable, Hashable {
    /// Listening (again): notifications sent while nobody listened are lost, so the node reads what they stood for.
    case listening
    /// The mailbox has letters.
    case wakeup
    /// A notice carried by the notification itself.
    case notice(String)
}

/// What a node left behind when it was declared dead.
public struct DeadNodes: Sendable {
    public var nodes: [ClusterNode]
    /// Those of `nodes` that died (fell silent) rather than left on graceful shutdown.
    public var died: [ClusterNode]
    /// The users (app id, username) whose devices were connected to them: those devices went offline.
    public var users: [(app: Int64, username: String)]

    public init(nodes: [ClusterNode], died: [ClusterNode], users: [(app: Int64, username: String)]) {
        self.nodes = nodes
        self.died = died
        self.users = users
    }
}

/// What several nodes on one database share beyond `BeaconStore`: membership with heartbeats, where each device is
/// connected, and what one node must tell another (deliver, close a connection): carried by a notification, or posted
/// to the node's mailbox. An engine that serves one process only (SQLite) does not implement it.
public protocol ClusterStore: BeaconStore {
    /// Joins the cluster: a new random epoch and a random slot no live node holds. Fails when 1024 nodes are live.
    /// Liveness is measured on the database's clock, so that nodes whose clocks disagree do not declare each other dead.
    func joinCluster(name: String) async throws -> ClusterNode
    /// Records that the node is alive. Returns how many other nodes hold a row (live, or silent and not yet declared
    /// dead; not those that left), as seen after the beat was sent; nil when this node was declared dead meanwhile (its
    /// row is gone: it must stop).
    func heartbeat(_ node: ClusterNode) async throws -> Int?
    /// Marks the node as gone (graceful shutdown): the next `removeDeadNodes`, on any node, cleans up after it at once.
    func leaveCluster(_ node: ClusterNode) async throws
    /// Declares dead every node silent for more than `silence` ms (or that left): releases its push claims (due at once)
    /// and removes its presence, its mailbox and its row, each dead node by exactly one caller. The caller's own heartbeat
    /// is recorded in the same transaction (so it never declares itself dead); nil means the caller itself was declared
    /// dead meanwhile (nothing else is done).
    func removeDeadNodes(silentFor silence: Int64, by node: ClusterNode) async throws -> DeadNodes?
    /// The live nodes, oldest first.
    func liveNodes() async throws -> [ClusterNode]

    /// Records that the device is connected through connection `id` on `node`, opened `openedAgo` ms ago (measured by the
    /// node; the store dates it on the database's clock, so that nodes' clocks need not agree), unless a connection opened
    /// later is recorded already or the node is no longer live. Connections of one device are recorded one at a time.
    func connect(_ device: DeviceKey, node: Int64, connection id: Int64, openedAgo: Int64) async throws -> ConnectOutcome
    /// Removes the device's presence if connection `id` on `node` is still the one recorded; true if it was (the device
    /// went offline).
    func disconnect(_ device: DeviceKey, node: Int64, connection id: Int64) async throws -> Bool
    /// Removes `node`'s presence rows whose connections are no longer live there (their `disconnect` failed or never ran):
    /// the node's rows are read first, then `live` is asked for the ids of the connections still registered on the node,
    /// and the rows read whose connection is not among them are removed (each only if still that connection's). A node
    /// registers a connection before it records it here, so a connection registering while this runs either is in `live`
    /// or has no row among those read: it is never removed. Rows are not added for live connections without one (a
    /// missing row is a connection replaced on another node, or one about to end). Returns the devices that went offline.
    func reconcilePresence(node: Int64, live: @Sendable () -> Set<Int64>) async throws -> [DeviceKey]
    /// The connected devices of the users: username → device id → connection (users with none are absent).
    func connections(of usernames: [String], app: Int64) async throws -> [String: [String: DeviceConnection]]
    /// Devices of the app connected to any node.
    func connectedDeviceCount(app: Int64) async throws -> Int

    /// Puts letters in their nodes' mailboxes (letters for nodes no longer live are dropped).
    func post(_ letters: [Letter]) async throws
    /// Takes (removes and returns) up to `limit` letters of the node's mailbox, oldest first.
    func takeLetters(for node: Int64, limit: Int) async throws -> [String]
    /// Sends each letter as a notification on its node's channel, in order, in one round trip and one transaction: an empty
    /// body (`Letter.wakeup`) only wakes the node to read its mailbox; another is the notice itself (it must fit,
    /// `Letter.fitsInANotification`). A node listening when the transaction commits gets them, after those of every
    /// transaction that committed before; a node not listening then never does.
    func notify(_ notifications: [Letter]) async throws
    /// Calls `onSignal` with `.listening` once listening, then with each notification for `node` as it arrives, until the
    /// listening connection ends (it throws then) or the task is cancelled. The connection is closed, never reused.
    func listen(for node: Int64, _ onSignal: @escaping @Sendable (NodeSignal) -> Void) async throws

    /// As `claimPushJobs(now:lease:limit:)`, recording `node` as the claimant so that the node's death releases them.
    func claimPushJobs(now: Int64, lease: Int64, limit: Int, node: Int64) async throws -> [PushJob]
}
