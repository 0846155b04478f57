package inject

// ReasonInjectNotGranted is the Warning Event on an annotated object whose sources
// its namespace is not granted (every one of them, or some, which are left out).
const ReasonInjectNotGranted = "TrustInjectNotGranted"
