package agent

import (
	"reflect"
	"testing"

	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/java"
	"github.com/a2farm/a2farm/schema"
	"github.com/a2farm/a2farm/worker/codegraph/graphtest"
)

// TestParseJavaAnswer: answers name Java files (a '$' in a name, as
// gson's $Gson$Types.java has), types, nested types, methods and
// constructors, and lines; tests are dropped.
func TestParseJavaAnswer(t *testing.T) {
	g := graphtest.Build(t, lang.NewSet(java.Language{}), map[string]string{
		"gson/src/main/java/com/google/gson/internal/$Gson$Types.java":                "package com.google.gson.internal;\n\npublic final class $Gson$Types {\n  static boolean equals(Object a, Object b) {\n    return a == b;\n  }\n}\n",
		"gson/src/main/java/com/google/gson/internal/bind/MapTypeAdapterFactory.java": "package com.google.gson.internal.bind;\n\npublic final class MapTypeAdapterFactory {\n  private final class Adapter {\n    Object read() {\n      return null;\n    }\n  }\n\n  public MapTypeAdapterFactory() {}\n}\n",
		"gson/src/test/java/com/google/gson/MapTest.java":                             "package com.google.gson;\n\nclass MapTest {\n  void testRead() {}\n}\n",
	})
	tests := []struct {
		name string
		raw  string
		want schema.Locations
	}{
		{
			name: "types, a nested type's method, a constructor",
			raw: "```\ngson/src/main/java/com/google/gson/internal/bind/MapTypeAdapterFactory.java\nclass: MapTypeAdapterFactory.Adapter\n" +
				"function: MapTypeAdapterFactory.Adapter.read\nfunction: MapTypeAdapterFactory.MapTypeAdapterFactory\n\n" +
				"gson/src/main/java/com/google/gson/internal/$Gson$Types.java\nfunction: $Gson$Types.equals\n```",
			want: schema.Locations{
				Files: []string{"gson/src/main/java/com/google/gson/internal/bind/MapTypeAdapterFactory.java", "gson/src/main/java/com/google/gson/internal/$Gson$Types.java"},
				Modules: []string{"gson/src/main/java/com/google/gson/internal/bind/MapTypeAdapterFactory.java:MapTypeAdapterFactory",
					"gson/src/main/java/com/google/gson/internal/$Gson$Types.java:$Gson$Types"},
				Entities: []string{"gson/src/main/java/com/google/gson/internal/bind/MapTypeAdapterFactory.java:MapTypeAdapterFactory.Adapter.read",
					"gson/src/main/java/com/google/gson/internal/bind/MapTypeAdapterFactory.java:MapTypeAdapterFactory.MapTypeAdapterFactory",
					"gson/src/main/java/com/google/gson/internal/$Gson$Types.java:$Gson$Types.equals"},
			},
		},
		{
			name: "a method by its name alone and by its line; tests dropped",
			raw:  "```\ngson/src/main/java/com/google/gson/internal/bind/MapTypeAdapterFactory.java\nmethod: read\nline: 6\n\ngson/src/test/java/com/google/gson/MapTest.java\nfunction: MapTest.testRead\n```",
			want: schema.Locations{
				Files:    []string{"gson/src/main/java/com/google/gson/internal/bind/MapTypeAdapterFactory.java"},
				Modules:  []string{"gson/src/main/java/com/google/gson/internal/bind/MapTypeAdapterFactory.java:MapTypeAdapterFactory"},
				Entities: []string{"gson/src/main/java/com/google/gson/internal/bind/MapTypeAdapterFactory.java:MapTypeAdapterFactory.Adapter.read"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseAnswer(tt.raw, g); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseAnswer:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}
