import Conductor
import Foundation

// Foundation's `Operation.QueuePriority` and Conductor's `JobPriority`, mapped case by case.
//
// Both have the same five levels, and today the same raw values (-8, -4, 0, 4, 8). The mapping
// still switches over cases, so that it cannot silently change meaning if either type gains a
// case or Foundation on some platform changes its numbering.
//
// | `Operation.QueuePriority` | `JobPriority` |
// |---|---|
// | `.veryHigh` | `.veryHigh` |
// | `.high` | `.high` |
// | `.normal` | `.normal` |
// | `.low` | `.low` |
// | `.veryLow` | `.veryLow` |

extension JobPriority {
    /// The Conductor priority for a Foundation queue priority: the level of the same name.
    ///
    /// A level added to Foundation in a later version maps to `.normal`.
    public init(_ queuePriority: Operation.QueuePriority) {
        switch queuePriority {
        case .veryHigh: self = .veryHigh
        case .high: self = .high
        case .normal: self = .normal
        case .low: self = .low
        case .veryLow: self = .veryLow
        @unknown default: self = .normal
        }
    }
}

extension Operation.QueuePriority {
    /// The Foundation queue priority for a Conductor priority: the level of the same name.
    public init(_ priority: JobPriority) {
        switch priority {
        case .veryHigh: self = .veryHigh
        case .high: self = .high
        case .normal: self = .normal
        case .low: self = .low
        case .veryLow: self = .veryLow
        }
    }
}
