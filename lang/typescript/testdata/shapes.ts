import { Base } from "./base";

/** A point. */
export interface Point { x: number; y: number }

export type Pair<T> = [T, T];

export enum Kind { Circle, Square }

@sealed
export class Circle extends Base {
  static count = 0;
  private r: number;
  readonly onResize = (k: number) => { this.r *= k; };
  handler = function (this: Circle) { return this.r; };

  constructor(r: number) {
    super();
    this.r = r;
  }

  @memo
  public get radius(): number {
    return this.r;
  }

  set radius(v: number) {
    this.r = v;
  }

  static async create(r: number): Promise<Circle> {
    return new Circle(r);
  }

  protected area(): number {
    return Math.PI * this.r ** 2;
  }
}

export default abstract class Shape {
  abstract area(): number;
  describe() {
    return `shape of ${this.area()}`;
  }
}

export function unit(): Circle {
  return new Circle(1);
}

export async function* walk(n: number) {
  for (let i = 0; i < n; i++) yield i;
}

export const scale = (c: Circle, k: number): number =>
  c.area() * k;

const twice = function (x: number) { return 2 * x; },
  thrice = (x: number) => 3 * x,
  notAFunction = 4;

let later: () => void;

function sealed(c: Function) {}
function memo(t: any, k: string, d: PropertyDescriptor) {}

// Overloads start the implementation's span; a declaration alone is none.
export function parse(s: string): number;
/** Parses a list. */
export function parse(s: string[]): number[];
export function parse(s: string | string[]): number | number[] {
  return Array.isArray(s) ? s.map(Number) : Number(s);
}

declare function external(x: number): void;

declare class Ambient {
  method(): void;
}
