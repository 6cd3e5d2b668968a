import Foundation

/// Hand-written SVG charts, no dependencies: `--svg DIR` writes
/// - `ns-per-job.svg`: median ns per job for each scenario and system, grouped bars on a log scale;
/// - `chain-scaling.svg`: Conductor's and Foundation's chain ns per job against chain length, log-log.
enum SVG {
    static let colors: [System: String] = [
        .conductor: "#1f6fb4", .foundation: "#d0432b", .dispatch: "#7a7a7a", .taskGroup: "#2f9e44",
    ]

    /// Writes the charts and returns the paths written.
    static func write(_ run: BenchmarkRun, to directory: String) throws -> [String] {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var written: [String] = []
        let charts = [("ns-per-job.svg", barChart(run)), ("chain-scaling.svg", scalingChart(run))]
        for (name, chart) in charts {
            guard let chart else { continue }
            let path = (directory as NSString).appendingPathComponent(name)
            try chart.write(toFile: path, atomically: true, encoding: .utf8)
            written.append(path)
        }
        return written
    }

    // MARK: Charts

    static func barChart(_ run: BenchmarkRun) -> String? {
        let scenarios = run.scenarios.filter { $0.metric != .bytesPerJob }
        let values = scenarios.flatMap { $0.measurements.compactMap { $0.stats?.median } }.filter { $0 > 0 }
        guard let smallest = values.min(), let largest = values.max() else { return nil }
        let systems = System.allCases
        let barWidth = 20.0
        let groupWidth = Double(systems.count) * barWidth + 28
        let (left, top, bottom) = (84.0, 84.0, 78.0)
        let plotHeight = 340.0
        let width = left + groupWidth * Double(scenarios.count) + 24
        let height = top + plotHeight + bottom
        let scale = LogScale(from: smallest, to: largest, length: plotHeight)
        let plotBottom = top + plotHeight

        var svg = Document(width: width, height: height)
        svg.text(
            "Median ns per job, by scenario and system (log scale; lower is faster)", x: left, y: 26, size: 16,
            weight: "bold")
        svg.text(
            "\(Machine.summary); \(run.configuration.runs) runs; latency shows p50 from add to start; memory "
                + "is in the table",
            x: left, y: 46, size: 11, color: "#555")
        legend(&svg, systems: systems, x: left, y: 66)
        for decade in scale.decades {
            let y = plotBottom - scale.position(decade)
            svg.line(x1: left, y1: y, x2: width - 16, y2: y, color: "#e3e3e3")
            svg.text(decadeLabel(decade), x: left - 8, y: y + 4, size: 11, anchor: "end", color: "#444")
        }
        svg.line(x1: left, y1: plotBottom, x2: width - 16, y2: plotBottom, color: "#888")
        svg.text("ns per job", x: 18, y: top + plotHeight / 2, size: 12, anchor: "middle", rotate: -90)

        for (group, scenario) in scenarios.enumerated() {
            let groupLeft = left + Double(group) * groupWidth + 14
            let reduced = scenario.measurement(.foundation)?.reducedSize ?? false
            for (slot, system) in systems.enumerated() {
                let x = groupLeft + Double(slot) * barWidth
                let center = x + barWidth / 2
                guard let measurement = scenario.measurement(system) else { continue }
                switch measurement.outcome {
                case .measured(let stats) where stats.median > 0:
                    let barHeight = max(1, scale.position(stats.median))
                    let label = Format.figure(stats.median) + (system == .foundation && reduced ? "*" : "")
                    svg.rect(
                        x: x + 2, y: plotBottom - barHeight, width: barWidth - 4, height: barHeight,
                        color: colors[system]!,
                        tooltip: "\(scenario.id), \(system.rawValue): \(label) \(scenario.metric.unit)")
                    svg.text(label, x: center + 3, y: plotBottom - barHeight - 4, size: 9, rotate: -90, color: "#333")
                case .failed:
                    svg.text(
                        "FAIL", x: center + 3, y: plotBottom - 4, size: 9, rotate: -90, color: "#c00", weight: "bold")
                default:
                    svg.text("n/a", x: center + 3, y: plotBottom - 4, size: 9, rotate: -90, color: "#999")
                }
            }
            let name = scenario.metric == .latency ? "latency (p50)" : scenario.id
            svg.text(
                name, x: groupLeft + groupWidth / 2 - 14, y: plotBottom + 20, size: 12, anchor: "middle", weight: "bold"
            )
            if reduced {
                svg.text(
                    "* Foundation smaller", x: groupLeft + groupWidth / 2 - 14, y: plotBottom + 36, size: 9,
                    anchor: "middle", color: "#777")
            }
        }
        svg.text(
            "* Foundation ran at a smaller size within its time budget; its figure is for that size.",
            x: left, y: height - 14, size: 10, color: "#777")
        return svg.rendered()
    }

    static func scalingChart(_ run: BenchmarkRun) -> String? {
        guard let scaling = run.scaling else { return nil }
        let series: [(System, [(Double, Double)])] = [System.conductor, .foundation].map { system in
            (
                system,
                scaling.points(for: system).compactMap { point in point.stats.map { (Double(point.jobs), $0.median) } }
            )
        }
        let xs = series.flatMap { $0.1.map(\.0) }
        let ys = series.flatMap { $0.1.map(\.1) }.filter { $0 > 0 }
        guard let minX = xs.min(), let maxX = xs.max(), let minY = ys.min(), let maxY = ys.max() else { return nil }
        let (left, top, plotWidth, plotHeight) = (84.0, 84.0, 560.0, 360.0)
        let width = left + plotWidth + 64
        let height = top + plotHeight + 80
        let xScale = LogScale(from: minX, to: maxX, length: plotWidth, headroom: 0)
        let yScale = LogScale(from: minY, to: maxY, length: plotHeight)
        let plotBottom = top + plotHeight

        var svg = Document(width: width, height: height)
        svg.text("Chain: ns per job against chain length (log-log)", x: left, y: 26, size: 16, weight: "bold")
        svg.text(
            "\(Machine.summary). A flat line means total time linear in the length.", x: left, y: 46, size: 11,
            color: "#555")
        legend(&svg, systems: [.conductor, .foundation], x: left, y: 66)
        for decade in yScale.decades {
            let y = plotBottom - yScale.position(decade)
            svg.line(x1: left, y1: y, x2: left + plotWidth, y2: y, color: "#e3e3e3")
            svg.text(decadeLabel(decade), x: left - 8, y: y + 4, size: 11, anchor: "end", color: "#444")
        }
        for decade in xScale.decades {
            let x = left + xScale.position(decade)
            svg.line(x1: x, y1: top, x2: x, y2: plotBottom, color: "#e3e3e3")
            svg.text(Format.count(Int(decade)), x: x, y: plotBottom + 18, size: 11, anchor: "middle", color: "#444")
        }
        svg.line(x1: left, y1: plotBottom, x2: left + plotWidth, y2: plotBottom, color: "#888")
        svg.line(x1: left, y1: top, x2: left, y2: plotBottom, color: "#888")
        svg.text("jobs in the chain", x: left + plotWidth / 2, y: plotBottom + 40, size: 12, anchor: "middle")
        svg.text("ns per job", x: 18, y: top + plotHeight / 2, size: 12, anchor: "middle", rotate: -90)
        svg.text(
            "Conductor: median of its runs per length. Foundation: one run per length, as long as its time "
                + "budget allows.",
            x: left, y: height - 14, size: 10, color: "#777")

        for (system, points) in series where !points.isEmpty {
            let color = colors[system]!
            let coordinates = points.map { (left + xScale.position($0.0), plotBottom - yScale.position($0.1)) }
            svg.polyline(coordinates, color: color)
            for ((jobs, value), (x, y)) in zip(points, coordinates) {
                svg.circle(
                    x: x, y: y, radius: 4, color: color,
                    tooltip: "\(system.rawValue), \(Format.count(Int(jobs))) jobs: \(Format.figure(value)) ns/job")
                // Below and to the right of a rising curve's points, above a flat one's, to stay off the line.
                let rising = points.count > 1 && points.last!.1 > points.first!.1 * 2
                svg.text(Format.figure(value), x: x + 7, y: rising ? y + 15 : y - 8, size: 10, color: color)
            }
        }
        return svg.rendered()
    }

    private static func legend(_ svg: inout Document, systems: [System], x: Double, y: Double) {
        var offset = x
        for system in systems {
            svg.rect(x: offset, y: y - 10, width: 12, height: 12, color: colors[system]!, tooltip: nil)
            svg.text(system.rawValue, x: offset + 17, y: y, size: 12)
            offset += 30 + Double(system.rawValue.count) * 7.5
        }
    }

    /// `1e3` → "1 µs".
    private static func decadeLabel(_ nanoseconds: Double) -> String {
        let units = [(1e9, "s"), (1e6, "ms"), (1e3, "µs"), (1, "ns")]
        for (size, unit) in units where nanoseconds >= size {
            return Format.count(Int((nanoseconds / size).rounded())) + " " + unit
        }
        return Format.figure(nanoseconds) + " ns"
    }
}

/// A base-10 logarithmic axis that spans whole decades around the data.
private struct LogScale {
    let low: Double
    let high: Double
    let length: Double

    init(from smallest: Double, to largest: Double, length: Double, headroom: Double = 0.18) {
        low = log10(smallest).rounded(.down)
        high = max(low + 1, (log10(largest) + headroom).rounded(.up))
        self.length = length
    }

    /// Distance from the axis origin.
    func position(_ value: Double) -> Double {
        (log10(value) - low) / (high - low) * length
    }

    var decades: [Double] {
        stride(from: low, through: high, by: 1).map { pow(10, $0) }
    }
}

/// An SVG document built element by element.
private struct Document {
    let width: Double
    let height: Double
    private var elements: [String] = []

    init(width: Double, height: Double) {
        self.width = width
        self.height = height
    }

    mutating func text(
        _ content: String, x: Double, y: Double, size: Double, anchor: String = "start", rotate: Double? = nil,
        color: String = "#222", weight: String = "normal"
    ) {
        let transform = rotate.map { " transform=\"rotate(\(n($0)) \(n(x)) \(n(y)))\"" } ?? ""
        elements.append(
            "<text x=\"\(n(x))\" y=\"\(n(y))\" font-size=\"\(n(size))\" text-anchor=\"\(anchor)\" fill=\"\(color)\" "
                + "font-weight=\"\(weight)\"\(transform)>\(escape(content))</text>")
    }

    mutating func rect(x: Double, y: Double, width: Double, height: Double, color: String, tooltip: String?) {
        let title = tooltip.map { "<title>\(escape($0))</title>" } ?? ""
        elements.append(
            "<rect x=\"\(n(x))\" y=\"\(n(y))\" width=\"\(n(width))\" height=\"\(n(height))\" "
                + "fill=\"\(color)\">\(title)</rect>"
        )
    }

    mutating func line(x1: Double, y1: Double, x2: Double, y2: Double, color: String) {
        elements.append(
            "<line x1=\"\(n(x1))\" y1=\"\(n(y1))\" x2=\"\(n(x2))\" y2=\"\(n(y2))\" stroke=\"\(color)\" "
                + "stroke-width=\"1\"/>"
        )
    }

    mutating func polyline(_ points: [(Double, Double)], color: String) {
        let list = points.map { "\(n($0.0)),\(n($0.1))" }.joined(separator: " ")
        elements.append("<polyline points=\"\(list)\" fill=\"none\" stroke=\"\(color)\" stroke-width=\"2\"/>")
    }

    mutating func circle(x: Double, y: Double, radius: Double, color: String, tooltip: String) {
        elements.append(
            "<circle cx=\"\(n(x))\" cy=\"\(n(y))\" r=\"\(n(radius))\" "
                + "fill=\"\(color)\"><title>\(escape(tooltip))</title></circle>"
        )
    }

    func rendered() -> String {
        """
        <?xml version="1.0" encoding="UTF-8"?>
        <svg xmlns="http://www.w3.org/2000/svg" width="\(n(width))" height="\(n(height))"
             viewBox="0 0 \(n(width)) \(n(height))"
             font-family="-apple-system, 'Segoe UI', Helvetica, Arial, sans-serif">
        <rect width="100%" height="100%" fill="white"/>
        \(elements.joined(separator: "\n"))
        </svg>

        """
    }

    private func n(_ value: Double) -> String {
        let rounded = (value * 10).rounded() / 10
        return rounded == rounded.rounded() ? String(Int(rounded)) : String(rounded)
    }

    private func escape(_ text: String) -> String {
        var result = ""
        for character in text {
            switch character {
            case "&": result += "&amp;"
            case "<": result += "&lt;"
            case ">": result += "&gt;"
            case "\"": result += "&quot;"
            default: result.append(character)
            }
        }
        return result
    }
}
