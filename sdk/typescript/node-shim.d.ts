// The few Node.js APIs the SDK and its tests use, declared here: no @types/node package is
// installed (no npm registry is reachable), and Debian's node-typescript ships none.
declare module "net" {
  import { EventEmitter } from "events";
  export class Socket extends EventEmitter {
    write(data: string): boolean;
    end(): void;
    destroy(): void;
    setEncoding(encoding: string): void;
    setNoDelay(noDelay?: boolean): void;
    destroyed: boolean;
  }
  export function createConnection(port: number, host: string, listener?: () => void): Socket;
}
declare module "events" {
  export class EventEmitter {
    on(event: string, listener: (...args: any[]) => void): this;
    once(event: string, listener: (...args: any[]) => void): this;
    removeListener(event: string, listener: (...args: any[]) => void): this;
  }
}
declare module "node:test" {
  export function test(name: string, fn: () => Promise<void> | void): void;
  export function test(name: string, options: { skip?: boolean | string; timeout?: number }, fn: () => Promise<void> | void): void;
}
declare module "node:assert/strict" {
  const assert: {
    (value: unknown, message?: string): void;
    equal(actual: unknown, expected: unknown, message?: string): void;
    deepEqual(actual: unknown, expected: unknown, message?: string): void;
    ok(value: unknown, message?: string): void;
    rejects(promise: Promise<unknown>, check?: (error: any) => boolean): Promise<void>;
    throws(fn: () => unknown, check?: (error: any) => boolean): void;
  };
  export default assert;
}
declare const process: {
  env: Record<string, string | undefined>;
  kill(pid: number, signal?: string): void;
};
declare function setTimeout(callback: () => void, ms: number): unknown;
declare function clearTimeout(handle: unknown): void;
declare function require(name: string): any;
declare const console: { log(...args: unknown[]): void };
