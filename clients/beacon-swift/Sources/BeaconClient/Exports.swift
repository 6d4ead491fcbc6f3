// An app imports `BeaconClient` alone: the model (`Message`, `ChatType`, `JSONValue`) and the push payload come with it.
@_exported import BeaconCore
@_exported import BeaconNotifications
