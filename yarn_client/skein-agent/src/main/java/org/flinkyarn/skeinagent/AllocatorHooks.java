package org.flinkyarn.skeinagent;

import java.util.concurrent.locks.LockSupport;
import net.bytebuddy.asm.Advice;
import org.apache.hadoop.yarn.client.api.AMRMClient;
import org.apache.hadoop.yarn.client.api.AMRMClient.ContainerRequest;

/**
 * skein's ApplicationMaster calls YARN's allocate in a loop on its allocator thread, then
 * sleeps {@code idleHeartbeat} ms (at most 5 s) while no container is pending and
 * {@code pendingHeartbeat} ms (at most 1 s) while one is; a request made while it slept waits
 * for the next call. With this agent the intervals are capped by the AppMaster's environment
 * (yarn.heartbeat.interval and yarn.heartbeat.container-request-interval) and a container
 * request ends the allocator's wait.
 */
public final class AllocatorHooks {
  /** The cap of the interval while no container is pending, in ms. */
  static final String HEARTBEAT_ENV = "FLINKYARN_YARN_HEARTBEAT_MS";
  /** The cap of the interval while one is, in ms. */
  static final String PENDING_HEARTBEAT_ENV = "FLINKYARN_YARN_PENDING_HEARTBEAT_MS";

  /** The thread in {@link #sleep}, or the last one there. */
  private static volatile Thread allocator;

  private AllocatorHooks() {}

  /** At the end of ApplicationMaster's constructor, which set skein's intervals: capped. */
  public static final class Intervals {
    private Intervals() {}

    @Advice.OnMethodExit
    static void cap(
        @Advice.FieldValue(value = "idleHeartbeat", readOnly = false) long idleHeartbeat,
        @Advice.FieldValue(value = "pendingHeartbeat", readOnly = false) long pendingHeartbeat) {
      idleHeartbeat = AllocatorHooks.capped(idleHeartbeat, HEARTBEAT_ENV);
      pendingHeartbeat = AllocatorHooks.capped(
          Math.min(pendingHeartbeat, idleHeartbeat), PENDING_HEARTBEAT_ENV);
    }
  }

  /** {@code interval}, at most the ms the environment variable {@code cap} says; as it is
   * when the variable is unset or not a number. */
  public static long capped(long interval, String cap) {
    try {
      return Math.min(interval, Long.parseLong(System.getenv(cap)));
    } catch (NumberFormatException unset) {
      return interval;
    }
  }

  /** Stands in for the allocator's {@code Thread.sleep(ms)}: up to {@code ms}, less when a
   * container is requested meanwhile (or was since the last wait). An interrupt ends it with
   * InterruptedException, as it ends Thread.sleep: that is how skein stops its allocator. */
  public static void sleep(long ms) throws InterruptedException {
    allocator = Thread.currentThread();
    LockSupport.parkUntil(System.currentTimeMillis() + ms);
    Thread.sleep(0L);  // throws if interrupted
  }

  /** Stands in for the service tracker's {@code client.addContainerRequest(request)}: the
   * allocator asks YARN for it at once. */
  public static <T extends ContainerRequest> void addContainerRequest(
      AMRMClient<T> client, T request) {
    client.addContainerRequest(request);
    LockSupport.unpark(allocator);  // nothing when null
  }
}
