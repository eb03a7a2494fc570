// JavacView prints what the JDK's own parser (the javac tree API) sees in
// Java files, in the form lang/java's parity test compares: for each file
// one JSON line with its package, its types and methods (kind, qualified
// name, first and last line, in source order, nested types after their
// members' order in the file) and its imports.
//
// Run it with the source launcher, no build: java JavacView.java ROOT FILE...
// (FILE relative to ROOT; @LIST reads the files from LIST, one a line).
import com.sun.source.tree.ClassTree;
import com.sun.source.tree.CompilationUnitTree;
import com.sun.source.tree.ImportTree;
import com.sun.source.tree.MethodTree;
import com.sun.source.tree.Tree;
import com.sun.source.util.JavacTask;
import com.sun.source.util.SourcePositions;
import com.sun.source.util.Trees;
import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import javax.tools.JavaCompiler;
import javax.tools.JavaFileObject;
import javax.tools.StandardJavaFileManager;
import javax.tools.ToolProvider;

public class JavacView {
  public static void main(String[] args) throws Exception {
    File root = new File(args[0]);
    JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
    StandardJavaFileManager fm = javac.getStandardFileManager(null, null, StandardCharsets.UTF_8);
    StringBuilder out = new StringBuilder();
    List<File> files = new ArrayList<>();
    for (int i = 1; i < args.length; i++) {
      if (args[i].startsWith("@")) { // a file listing the files, one a line
        for (String rel : Files.readAllLines(Path.of(args[i].substring(1)))) {
          if (!rel.isBlank()) {
            files.add(new File(root, rel));
          }
        }
      } else {
        files.add(new File(root, args[i]));
      }
    }
    Iterable<? extends JavaFileObject> units = fm.getJavaFileObjectsFromFiles(files);
    // Parse only: no symbol is entered, nothing is attributed, no error
    // in another file matters.
    JavacTask task = (JavacTask) javac.getTask(null, fm, d -> {}, List.of("-proc:none", "--enable-preview", "--release", "17"), null, units);
    SourcePositions pos = Trees.instance(task).getSourcePositions();
    for (CompilationUnitTree cu : task.parse()) {
      String rel = root.toURI().relativize(cu.getSourceFile().toUri()).getPath();
      List<String> defs = new ArrayList<>();
      for (Tree t : cu.getTypeDecls()) {
        if (t instanceof ClassTree) {
          type(cu, pos, (ClassTree) t, "", defs);
        }
      }
      List<String> imports = new ArrayList<>();
      for (ImportTree imp : cu.getImports()) {
        imports.add((imp.isStatic() ? "static " : "") + imp.getQualifiedIdentifier().toString());
      }
      String pkg = cu.getPackageName() == null ? "" : cu.getPackageName().toString();
      out.append("{\"path\":").append(quote(rel)).append(",\"package\":").append(quote(pkg))
          .append(",\"defs\":").append(list(defs)).append(",\"imports\":").append(list(imports)).append("}\n");
    }
    System.out.print(out);
  }

  // type adds a type and then its members, in source order: methods and
  // constructors (a constructor is named after its type) and nested types.
  // An annotation type's elements are not methods of the graph.
  static void type(CompilationUnitTree cu, SourcePositions pos, ClassTree c, String outer, List<String> defs) {
    String name = outer.isEmpty() ? c.getSimpleName().toString() : outer + "." + c.getSimpleName();
    defs.add("class " + name + " " + span(cu, pos, c));
    boolean annotation = c.getKind() == Tree.Kind.ANNOTATION_TYPE;
    for (Tree m : c.getMembers()) {
      if (m instanceof ClassTree) {
        type(cu, pos, (ClassTree) m, name, defs);
      } else if (m instanceof MethodTree && !annotation) {
        MethodTree mt = (MethodTree) m;
        String mname = mt.getName().contentEquals("<init>") ? c.getSimpleName().toString() : mt.getName().toString();
        defs.add("function " + name + "." + mname + " " + span(cu, pos, m));
      }
    }
  }

  static String span(CompilationUnitTree cu, SourcePositions pos, Tree t) {
    long start = pos.getStartPosition(cu, t), end = pos.getEndPosition(cu, t);
    return cu.getLineMap().getLineNumber(start) + "-" + cu.getLineMap().getLineNumber(Math.max(start, end - 1));
  }

  static String list(List<String> items) {
    StringBuilder b = new StringBuilder("[");
    for (int i = 0; i < items.size(); i++) {
      b.append(i > 0 ? "," : "").append(quote(items.get(i)));
    }
    return b.append("]").toString();
  }

  static String quote(String s) {
    StringBuilder b = new StringBuilder("\"");
    for (char ch : s.toCharArray()) {
      if (ch == '"' || ch == '\\') {
        b.append('\\').append(ch);
      } else if (ch < 0x20) {
        b.append(String.format("\\u%04x", (int) ch));
      } else {
        b.append(ch);
      }
    }
    return b.append("\"").toString();
  }
}
