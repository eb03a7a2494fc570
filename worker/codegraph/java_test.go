package codegraph_test

import (
	"bytes"
	"testing"

	"github.com/a2farm/a2farm/internal/golden"
	"github.com/a2farm/a2farm/lang"
	"github.com/a2farm/a2farm/lang/java"
	"github.com/a2farm/a2farm/worker/codegraph/graphtest"
)

// javaFiles is a two-module Maven build: classes, interfaces, an enum
// with a method, a record, an annotation type, nested and local types,
// overloads and constructors; single-type, on-demand and static imports
// across modules and source roots; tests, build output and generated
// sources a graph leaves out of the tools.
var javaFiles = map[string]string{
	"core/src/main/java/com/acme/shape/Shape.java": `package com.acme.shape;

/** A shape. */
public interface Shape extends Comparable<Shape> {
  double area();

  default int compareTo(Shape o) {
    return Double.compare(area(), o.area());
  }
}
`,
	"core/src/main/java/com/acme/shape/Circle.java": `package com.acme.shape;

import java.util.List;
import com.acme.util.Maths;
import static com.acme.util.Maths.square;

@Deprecated
public class Circle extends AbstractShape implements Shape {
  private final double r;

  public Circle(double r) { this.r = r; }

  public Circle() { this(1); }

  @Override
  public double area() { return Maths.PI * square(r); }

  public Circle scaled(double k) { return new Circle(r * k); }

  public Circle scaled(int k) { return scaled((double) k); }

  static final class Builder {
    private double r;
    Builder radius(double r) { this.r = r; return this; }
    Circle build() { check(); return new Circle(r); }
    private void check() { Maths.positive(r); }
  }

  enum Unit {
    CM, IN {
      @Override double factor() { return 2.54; }
    };
    double factor() { return 1; }
  }
}
`,
	"core/src/main/java/com/acme/shape/AbstractShape.java": `package com.acme.shape;

abstract class AbstractShape {
  String describe() { return name() + " of area " + ((Shape) this).area(); }

  String name() {
    Runnable r = new Runnable() { public void run() { describe(); } };
    class Local { void go() {} }
    return getClass().getSimpleName();
  }
}
`,
	"core/src/main/java/com/acme/util/Maths.java": `package com.acme.util;

public final class Maths {
  public static final double PI = 3.14159;
  private Maths() {}
  public static double square(double x) { return x * x; }
  public static void positive(double x) { if (x < 0) throw new IllegalArgumentException(); }
}
`,
	"core/src/main/java/com/acme/util/Point.java": `package com.acme.util;

public record Point(int x, int y) {
  public Point {
    if (x < 0) throw new IllegalArgumentException();
  }
  public static Point origin() { return new Point(0, 0); }
}
`,
	"core/src/main/java/com/acme/util/Tag.java": `package com.acme.util;

public @interface Tag {
  String value() default "";
}
`,
	"app/src/main/java/com/acme/app/Main.java": `package com.acme.app;

import com.acme.shape.*;
import com.acme.util.Point;
import static com.acme.util.Maths.*;

public class Main {
  public static void main(String[] args) {
    Shape s = new Circle.Builder().radius(2).build();
    System.out.println(square(s.area()) + Point.origin().x());
    run();
  }

  private static void run() { new Main(); }
}
`,
	"core/src/test/java/com/acme/shape/CircleTest.java": `package com.acme.shape;

import org.junit.jupiter.api.Test;

class CircleTest {
  @Test void area() { new Circle(1).area(); }
}
`,
	"core/src/main/java/com/acme/shape/ShapesIT.java":                   "package com.acme.shape;\nclass ShapesIT { void all() {} }\n",
	"core/target/classes/com/acme/Gen.java":                             "class Gen {}\n",
	"core/build/generated/sources/annotationProcessor/java/main/G.java": "class G {}\n",
	"core/src/main/java/com/acme/util/package-info.java":                "/** Utilities. */\npackage com.acme.util;\n",
}

func TestJavaGraph(t *testing.T) {
	g := graphtest.Build(t, lang.NewSet(java.Language{}), javaFiles)
	var buf bytes.Buffer
	if err := g.WriteJSONLines(&buf); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "java_graph.golden.jsonl", buf.Bytes())

	const shape, circle, abs, maths, point, main = "core/src/main/java/com/acme/shape/Shape.java", "core/src/main/java/com/acme/shape/Circle.java",
		"core/src/main/java/com/acme/shape/AbstractShape.java", "core/src/main/java/com/acme/util/Maths.java",
		"core/src/main/java/com/acme/util/Point.java", "app/src/main/java/com/acme/app/Main.java"
	for _, id := range []string{shape + ":Shape", shape + ":Shape.area", shape + ":Shape.compareTo", circle + ":Circle",
		circle + ":Circle.Circle", circle + ":Circle.area", circle + ":Circle.scaled", circle + ":Circle.Builder",
		circle + ":Circle.Builder.build", circle + ":Circle.Unit", circle + ":Circle.Unit.factor", point + ":Point",
		point + ":Point.Point", point + ":Point.origin", "core/src/main/java/com/acme/util/Tag.java:Tag",
		"core/src/test/java/com/acme/shape/CircleTest.java:CircleTest.area", "core/src/main/java/com/acme/util/package-info.java"} {
		if _, ok := g.Lookup(id); !ok {
			t.Errorf("node %s missing", id)
		}
	}
	for _, id := range []string{abs + ":AbstractShape.name.Local", abs + ":AbstractShape.Local", abs + ":AbstractShape.run",
		"core/src/main/java/com/acme/util/Tag.java:Tag.value", "core/target/classes/com/acme/Gen.java",
		"core/build/generated/sources/annotationProcessor/java/main/G.java", circle + ":Circle.r"} {
		if _, ok := g.Lookup(id); ok {
			t.Errorf("node %s exists; want it absent", id)
		}
	}
	edges := edgeSet(g)
	for _, want := range []string{
		circle + " contains " + circle + ":Circle",
		circle + ":Circle contains " + circle + ":Circle.Builder",
		circle + ":Circle.Builder contains " + circle + ":Circle.Builder.build",
		circle + ":Circle.Unit contains " + circle + ":Circle.Unit.factor",
		circle + " imports " + maths,                                                 // single-type and static imports, one edge
		main + " imports core/src/main/java/com/acme/shape",                          // on demand: the package's folder
		main + " imports " + point,                                                   // across modules
		circle + ":Circle inherits " + abs + ":AbstractShape",                        // same package
		circle + ":Circle inherits " + shape + ":Shape",                              // implements
		circle + ":Circle.scaled invokes " + circle + ":Circle.Circle",               // new T(): its constructor
		circle + ":Circle.scaled invokes " + circle + ":Circle.scaled",               // an overload
		circle + ":Circle.area invokes " + maths + ":Maths.square",                   // a static import
		circle + ":Circle.Builder.build invokes " + circle + ":Circle.Builder.check", // its own type
		circle + ":Circle.Builder.check invokes " + maths + ":Maths.positive",        // T.m() on an import
		main + ":Main.main invokes " + circle + ":Circle.Builder",                    // new T() without a constructor: the type
		main + ":Main.main invokes " + point + ":Point.origin",                       // T imported
		main + ":Main.main invokes " + maths + ":Maths.square",                       // static on demand
		main + ":Main.main invokes " + main + ":Main.run",                            // its own type
		abs + ":AbstractShape.describe invokes " + abs + ":AbstractShape.name",
		abs + ":AbstractShape.name invokes " + abs + ":AbstractShape.describe", // inside an anonymous class: its method's
		shape + ":Shape.compareTo invokes " + shape + ":Shape.area",
	} {
		if !edges[want] {
			t.Errorf("edge missing: %s", want)
		}
	}
	if edges[main+":Main.main invokes "+circle+":Circle.Builder.build"] {
		t.Error("a call on an expression was resolved")
	}
	if edges[circle+":Circle.Circle invokes "+circle+":Circle.Circle"] {
		t.Error("this(1) made an invokes edge; explicit constructor calls are not method calls")
	}
}
