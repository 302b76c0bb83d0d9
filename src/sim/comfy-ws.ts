/**
 * The simulated ComfyUI's websocket clients, keyed by session id like server.py's `sockets`
 * dict (a reconnect with the same clientId replaces the old socket), and its routing rule:
 * a message with a sid goes to that client only (dropped if it is not connected), without one
 * to everybody.
 */
import type { ServerWebSocket } from "bun";
import { dumpsPy, type PyLike } from "./pyjson.ts";

export interface WsData {
  sid: string;
  /** First client message not seen yet (feature_flags negotiation). */
  first: boolean;
}

export class SocketHub {
  private readonly sockets = new Map<string, ServerWebSocket<WsData>>();

  add(ws: ServerWebSocket<WsData>): void {
    this.sockets.set(ws.data.sid, ws);
  }

  remove(ws: ServerWebSocket<WsData>): void {
    if (this.sockets.get(ws.data.sid) === ws) this.sockets.delete(ws.data.sid);
  }

  get size(): number {
    return this.sockets.size;
  }

  ids(): string[] {
    return [...this.sockets.keys()];
  }

  /** `send_json(event, data, sid)`: to `sid` when given, else broadcast. */
  send(type: string, data: PyLike, sid?: string): void {
    const text = dumpsPy({ type, data });
    for (const ws of this.targets(sid)) ws.send(text);
  }

  sendBinary(bytes: Uint8Array, sid?: string): void {
    for (const ws of this.targets(sid)) ws.send(bytes);
  }

  closeAll(): void {
    for (const ws of this.sockets.values()) ws.close(1001, "server stopping");
    this.sockets.clear();
  }

  private targets(sid?: string): ServerWebSocket<WsData>[] {
    if (sid === undefined) return [...this.sockets.values()];
    const ws = this.sockets.get(sid);
    return ws ? [ws] : [];
  }
}
