package org.flinkyarn.skeinagent;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import org.apache.hadoop.yarn.api.records.ApplicationAttemptId;
import org.apache.hadoop.yarn.api.records.FinalApplicationStatus;
import org.apache.hadoop.yarn.client.api.AMRMClient;
import org.apache.hadoop.yarn.exceptions.YarnException;

/**
 * What skein's ApplicationMaster calls instead of YARN's methods in its exit hook
 * ({@code runOnExit}): there it unregisters (which ends the application and makes YARN start
 * no other attempt) on a success or on what it counts as the last attempt, and then removes
 * the application's folder. Our AppMaster (Python, in the same container and working folder)
 * leaves files there that tell it more.
 */
public final class AppMasterHooks {
  /** The history server's page of the ended application (flinkyarn/archive.py). */
  static final String FINAL_TRACKING_URL_FILE = "flinkyarn-final-tracking-url";
  /** Left by our AppMaster for every end no other attempt could change
   * (flinkyarn/job_store.py). */
  static final String FINAL_END_FILE = "flinkyarn-final-end";
  /** Set in our AppMaster's environment: it leaves FINAL_END_FILE for every real end. */
  static final String FINAL_END_ENV = "FLINKYARN_FINAL_END_BY_FILE";

  private AppMasterHooks() {}

  /** Stands in for {@code client.unregisterApplicationMaster(status, message, url)}: the
   * final tracking URL is the one the AppMaster left, if it did; else skein's. */
  public static void unregisterApplicationMaster(AMRMClient<?> client,
      FinalApplicationStatus status, String message, String url)
      throws YarnException, IOException {
    Path left = Paths.get(FINAL_TRACKING_URL_FILE);
    if (Files.isReadable(left)) {
      url = new String(Files.readAllBytes(left), StandardCharsets.UTF_8).trim();
    }
    client.unregisterApplicationMaster(status, message, url);
  }

  /**
   * Stands in for {@code attemptId.getAttemptId()}, which skein compares with the maximum
   * attempts: the largest int (the last: skein unregisters) once the AppMaster left
   * FINAL_END_FILE; else, in our AppMaster, 0 (never the last by skein's count: YARN decides,
   * and it counts with the attempt-failures validity interval, which skein's count does not
   * know); else (another skein application) skein's own number.
   */
  public static int getAttemptId(ApplicationAttemptId attemptId) {
    if (Files.exists(Paths.get(FINAL_END_FILE))) {
      return Integer.MAX_VALUE;
    }
    if (System.getenv(FINAL_END_ENV) != null) {
      return 0;
    }
    return attemptId.getAttemptId();
  }
}
