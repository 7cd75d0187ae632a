// The extension's single log: a LogOutputChannel (level chosen with "Developer: Set Log Level"),
// with every line passed through redaction so keys never reach it.
import * as vscode from 'vscode';
import type { ProxyLogger } from '../capture/proxy.js';
import { redact } from './redact.js';

export class Logger implements ProxyLogger, vscode.Disposable {
  private readonly secrets = new Set<string>();

  constructor(readonly channel: vscode.LogOutputChannel) {}

  /** Literal values to scrub in addition to the known secret shapes (admin key, engine keys). */
  addSecret(value: string | undefined): void {
    if (value) this.secrets.add(value);
  }

  private clean(message: string): string {
    return redact(message, this.secrets);
  }

  trace(message: string): void {
    this.channel.trace(this.clean(message));
  }
  debug(message: string): void {
    this.channel.debug(this.clean(message));
  }
  info(message: string): void {
    this.channel.info(this.clean(message));
  }
  warn(message: string): void {
    this.channel.warn(this.clean(message));
  }
  error(message: string): void {
    this.channel.error(this.clean(message));
  }
  show(): void {
    this.channel.show(true);
  }
  dispose(): void {
    this.channel.dispose();
  }
}
