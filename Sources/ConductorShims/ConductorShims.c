// Everything is in include/ConductorShims.h, inline; SwiftPM builds a C target from at least one
// source file.
#include "ConductorShims.h"
