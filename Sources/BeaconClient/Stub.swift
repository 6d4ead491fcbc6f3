enum _StubBeaconClient {}
