package schema

import "strings"

// Location ids: a file is its repository-relative path ("pkg/mod.py"); an
// entity is "file:Qualified.Name"; its module is the first segment of the
// qualified name ("pkg/mod.py:Class" for anything inside Class, or the
// function itself for a top-level function).

// FileOf returns the file part of a location id.
func FileOf(id string) string {
	file, _, _ := strings.Cut(id, ":")
	return file
}

// ModuleOf returns the module id of an entity id, or "" for a file id.
func ModuleOf(id string) string {
	file, qual, ok := strings.Cut(id, ":")
	if !ok || qual == "" {
		return ""
	}
	first, _, _ := strings.Cut(qual, ".")
	return file + ":" + first
}
