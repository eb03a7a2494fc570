/*
 * A fixture for the parity test: the Java a repository holds, written for
 * a2farm. Every construct here is one tree-sitter-java and javac must read
 * alike.
 */
package org.example.inventory;

import java.util.*;
import java.util.function.Function;
import java.util.concurrent.ConcurrentHashMap;
import static java.util.Objects.requireNonNull;
import static java.util.stream.Collectors.*;

/**
 * A store of items by name.
 *
 * @param <K> the key
 */
@SuppressWarnings({"unchecked", "rawtypes"})
public final class Inventory<K extends Comparable<K>> implements Iterable<Inventory.Item<K>>, AutoCloseable {

  private static final int DEFAULT_CAPACITY = 16;

  private final Map<K, Item<K>> items = new ConcurrentHashMap<>(DEFAULT_CAPACITY);
  private volatile boolean closed;

  static {
    Locale.setDefault(Locale.ROOT);
  }

  {
    closed = false;
  }

  public Inventory() {
    this(DEFAULT_CAPACITY);
  }

  @Deprecated(since = "2.0", forRemoval = false)
  public Inventory(int capacity) {
    if (capacity < 0) {
      throw new IllegalArgumentException("capacity " + capacity);
    }
  }

  public <V> Optional<V> lookup(K key, Function<? super Item<K>, ? extends V> view) {
    requireNonNull(key, "key");
    return Optional.ofNullable(items.get(key)).map(view);
  }

  public void put(K key, int count) { items.merge(key, new Item<>(key, count), Item::plus); }

  public void put(Item<K> item) {
    put(item.key(), item.count());
  }

  public List<K> keys() {
    return items.keySet().stream().sorted().collect(toList());
  }

  public String report() {
    return """
        Inventory
          items: %d
        """.formatted(items.size());
  }

  @Override
  public Iterator<Item<K>> iterator() {
    return new Iterator<>() {
      private final Iterator<Item<K>> it = items.values().iterator();

      @Override
      public boolean hasNext() {
        return it.hasNext();
      }

      @Override
      public Item<K> next() {
        return it.next();
      }
    };
  }

  @Override
  public synchronized void close() {
    class Closer implements Runnable {
      public void run() {
        closed = true;
      }
    }
    new Closer().run();
  }

  /** One line of the inventory. */
  public record Item<K>(K key, int count) implements Comparable<Item<K>> {
    public Item {
      if (count < 0) throw new IllegalArgumentException();
    }

    Item<K> plus(Item<K> other) {
      return new Item<>(key, count + other.count);
    }

    @Override
    public int compareTo(Item<K> o) {
      return Integer.compare(count, o.count);
    }
  }

  public sealed interface Event permits Added, Removed {
    K0 key();

    default String describe() {
      return switch (this) {
        case Added a -> "added " + a.key();
        case Removed r -> "removed " + r.key();
      };
    }

    interface K0 {}
  }

  public record Added(Event.K0 key) implements Event {}

  public record Removed(Event.K0 key) implements Event {}

  public enum Unit implements Function<Integer, Integer> {
    PIECE(1) {
      @Override
      public Integer apply(Integer n) {
        return n;
      }
    },
    DOZEN(12);

    private final int size;

    Unit(int size) {
      this.size = size;
    }

    @Override
    public Integer apply(Integer n) {
      return n * size;
    }
  }

  @java.lang.annotation.Retention(java.lang.annotation.RetentionPolicy.RUNTIME)
  @interface Audited {
    String by() default "system";

    int level() default 1;

    enum Level { LOW, HIGH }
  }
}

abstract class Ledger<T> extends AbstractList<T> {
  abstract void post(T entry) throws java.io.IOException;

  @Override
  public int size() {
    return 0;
  }
}

interface Counted {
  int count();
}
