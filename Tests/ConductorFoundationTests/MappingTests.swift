import Conductor
import ConductorFoundation
import ConductorTestSupport
import Dispatch
import Foundation
import Testing

// The public mappings, checked exhaustively. The expected values are written as switches over
// cases, with no `default`, so a case added to any of the types stops this file compiling until
// it is given a row. Raw values differ between Apple platforms and swift-corelibs-foundation; they
// are used only to enumerate the cases of types that are not `CaseIterable`, never to map.

/// Every case of `QualityOfService`, found by trying every raw value in a range wide enough for
/// both numberings (Apple's `qos_class_t` values and swift-corelibs-foundation's 0 through 4).
private let allQualitiesOfService = (-256...256).compactMap(QualityOfService.init(rawValue:))

/// Every case of `Operation.QueuePriority`, found the same way.
private let allQueuePriorities = (-256...256).compactMap(Operation.QueuePriority.init(rawValue:))

/// Every case of `DispatchQoS.QoSClass`, listed by hand; `expected(for:)` proves the list complete.
private let allQoSClasses: [DispatchQoS.QoSClass] = [
    .userInteractive, .userInitiated, .default, .utility, .background, .unspecified,
]

private func expected(for qualityOfService: QualityOfService) -> DispatchQoS.QoSClass {
    switch qualityOfService {
    case .userInteractive: .userInteractive
    case .userInitiated: .userInitiated
    case .default: .default
    case .utility: .utility
    case .background: .background
    }
}

private func expected(for qosClass: DispatchQoS.QoSClass) -> QualityOfService {
    switch qosClass {
    case .userInteractive: .userInteractive
    case .userInitiated: .userInitiated
    case .default: .default
    case .utility: .utility
    case .background: .background
    case .unspecified: .default
    }
}

private func expected(for queuePriority: Operation.QueuePriority) -> JobPriority {
    switch queuePriority {
    case .veryHigh: .veryHigh
    case .high: .high
    case .normal: .normal
    case .low: .low
    case .veryLow: .veryLow
    }
}

@Suite("Mappings")
struct MappingTests {
    @Test("the enumerations find every case")
    func enumerationsAreComplete() {
        #expect(allQualitiesOfService.count == 5)
        #expect(allQueuePriorities.count == 5)
        #expect(Set(allQoSClasses.map { "\($0)" }).count == 6)
    }

    @Test("QualityOfService → DispatchQoS.QoSClass: every case to the case of the same name")
    func qualityOfServiceToDispatch() {
        for qualityOfService in allQualitiesOfService {
            #expect(DispatchQoS.QoSClass(qualityOfService) == expected(for: qualityOfService), "\(qualityOfService)")
        }
    }

    @Test("DispatchQoS.QoSClass → QualityOfService: every case by name, and .unspecified to .default")
    func dispatchToQualityOfService() {
        for qosClass in allQoSClasses {
            #expect(QualityOfService(qosClass) == expected(for: qosClass), "\(qosClass)")
        }
    }

    @Test("QualityOfService survives a round trip through Dispatch")
    func qualityOfServiceRoundTrip() {
        for qualityOfService in allQualitiesOfService {
            #expect(QualityOfService(DispatchQoS.QoSClass(qualityOfService)) == qualityOfService)
        }
    }

    @Test("Operation.QueuePriority → JobPriority: every case to the case of the same name")
    func queuePriorityToJobPriority() {
        for queuePriority in allQueuePriorities {
            #expect(JobPriority(queuePriority) == expected(for: queuePriority), "\(queuePriority)")
        }
    }

    @Test("JobPriority → Operation.QueuePriority: every case, inverse of the other direction")
    func jobPriorityToQueuePriority() {
        #expect(Set(allQueuePriorities.map(JobPriority.init)) == Set(JobPriority.allCases))
        for priority in JobPriority.allCases {
            let queuePriority = Operation.QueuePriority(priority)
            #expect(expected(for: queuePriority) == priority, "\(priority)")
        }
    }
}
