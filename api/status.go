package api

import "github.com/corgifs/corgifs/feedback"

// Status is MNT/.corgifs/feedback/status.json (StatusPath): the parts of
// the newest epochs, what arrived and what was refused. The feedback store
// builds it, so the type is declared in package feedback; it is named here
// so that every file a mount serves has its type in this package.
type Status = feedback.Status
