// Package k8s has no code of its own: its tests render every kustomize
// overlay of XCT's Kubernetes manifests (base/, components/, overlays/),
// decode each object strictly into the Kubernetes API types and check what
// production needs (probes, limits, security context, references, the
// network policy graph, the NATS configuration), and check the Dockerfile.
//
// It is a module of its own (deploy/k8s/go.mod), so the Kubernetes
// dependencies never enter XCT's go.mod. `make test` runs it.
package k8s
