import Testing
@Test func stub() { #expect(Bool(true)) }
