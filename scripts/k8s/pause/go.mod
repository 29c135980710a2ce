// The pause program of the test node's sandbox image (scripts/k8s-testenv image pause).
module bulkhead.local/pause

go 1.24.0
