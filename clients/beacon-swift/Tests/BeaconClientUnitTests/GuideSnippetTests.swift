import Foundation
import Testing

/// docs/ios.md shows code that compiles: every Swift block of the guide is in GuideSnippets.swift, line for line.
@Suite struct GuideSnippetTests {
    @Test func everySwiftBlockOfTheGuideIsCompiledCode() throws {
        let here = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        let guide = try String(contentsOf: here.appendingPathComponent("../../../../docs/ios.md").standardizedFileURL, encoding: .utf8)
        let snippets = Self.lines(try String(contentsOf: here.appendingPathComponent("GuideSnippets.swift"), encoding: .utf8))
        let blocks = guide.components(separatedBy: "```swift\n").dropFirst().map { $0.components(separatedBy: "```")[0] }
        #expect(blocks.count >= 8)
        for block in blocks {
            let lines = Self.lines(block)
            let found = (0...(snippets.count - lines.count)).contains { Array(snippets[$0..<$0 + lines.count]) == lines }
            #expect(found, "not in GuideSnippets.swift:\n\(block)")
        }
    }

    /// Lines without their indentation, blank ones left out.
    private static func lines(_ text: String) -> [String] {
        text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }
}
