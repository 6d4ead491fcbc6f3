import ArgumentParser
import BeaconServer

extension Setting {
    /// The flag's `--help` text: the meaning, the environment variable and the default.
    var help: ArgumentHelp {
        ArgumentHelp(
            "\(meaning) [\([environment.map { "env \($0)" }, "default \(defaultText)"].compactMap { $0 }.joined(separator: "; "))]")
    }
}

struct ConfigReferenceCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "config-reference",
        abstract: "Print every setting (flag, environment variable, file key, default, what it does) as the README's Markdown table.")

    func run() {
        print(Settings.reference, terminator: "")
    }
}
