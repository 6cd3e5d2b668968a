import Dispatch
import Foundation

// Foundation's `QualityOfService` and Dispatch's `DispatchQoS.QoSClass`, mapped case by case.
//
// The raw values are not portable: on Apple platforms `QualityOfService` carries the `qos_class_t`
// values (`.userInteractive` is 0x21, `.default` is -1), while swift-corelibs-foundation numbers
// its cases from 0 (`.userInteractive` is 0, `.default` is 4). So the mapping switches over cases
// and never converts a raw value.
//
// | `QualityOfService` | `DispatchQoS.QoSClass` |
// |---|---|
// | `.userInteractive` | `.userInteractive` |
// | `.userInitiated` | `.userInitiated` |
// | `.default` | `.default` |
// | `.utility` | `.utility` |
// | `.background` | `.background` |
// | `.default` | `.unspecified` (one way: Foundation has no "unspecified") |

extension DispatchQoS.QoSClass {
    /// The Dispatch class of service for a Foundation quality of service, case by case.
    ///
    /// Each of the five Foundation cases maps to the Dispatch case of the same name. A case added
    /// to Foundation in a later version maps to `.default`.
    public init(_ qualityOfService: QualityOfService) {
        switch qualityOfService {
        case .userInteractive: self = .userInteractive
        case .userInitiated: self = .userInitiated
        case .default: self = .default
        case .utility: self = .utility
        case .background: self = .background
        @unknown default: self = .default
        }
    }
}

extension QualityOfService {
    /// The Foundation quality of service for a Dispatch class of service, case by case.
    ///
    /// Each Dispatch case maps to the Foundation case of the same name, except `.unspecified`,
    /// which Foundation cannot express and which maps to `.default` (what an operation whose
    /// quality of service was never set reports). A case added to Dispatch in a later version maps
    /// to `.default`.
    public init(_ qosClass: DispatchQoS.QoSClass) {
        switch qosClass {
        case .userInteractive: self = .userInteractive
        case .userInitiated: self = .userInitiated
        case .default: self = .default
        case .utility: self = .utility
        case .background: self = .background
        case .unspecified: self = .default
        @unknown default: self = .default
        }
    }
}
