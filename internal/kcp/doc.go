// Package kcp holds the small kcp vocabulary that the controller and the
// webhook share: parsing workspace URLs, the key of an object across logical
// clusters, the path of a workspace as its APIBindings record it,
// and the metadata of an object as kcp stores it (read straight from its
// JSON).
package kcp
