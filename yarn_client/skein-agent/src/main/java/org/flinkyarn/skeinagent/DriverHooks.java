package org.flinkyarn.skeinagent;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.yarn.api.records.ApplicationAccessType;
import org.apache.hadoop.yarn.api.records.ApplicationSubmissionContext;
import org.apache.hadoop.yarn.api.records.ContainerLaunchContext;
import org.apache.hadoop.yarn.api.records.LocalResource;

/** What skein's driver ({@code Driver.submitApplicationInner}) calls instead of YARN's
 * methods, in the driver's JVM. */
public final class DriverHooks {
  /** The YARN application type of every application this driver submits, lists or checks. */
  public static final String APPLICATION_TYPE = "flinkyarn";
  /** System property: YARN's attempt-failures validity interval in ms (absent: YARN's -1,
   * every failure counts), as Flink's yarn.application-attempt-failures-validity-interval. */
  public static final String VALIDITY_INTERVAL = "flinkyarn.attempt-failures-validity-interval";
  /** System property: the ApplicationMaster's JVM options, which name the agent jar
   * ({@code -javaagent:<name>=appmaster}) the application localizes under that name. */
  public static final String AM_JAVA_OPTIONS = "flinkyarn.skein.am-java-options";
  /** How skein 0.8.2 starts the ApplicationMaster's JVM. */
  static final String SKEIN_AM_JAVA = "/bin/java -Xmx128M ";

  private DriverHooks() {}

  /** Stands in for {@code context.setMaxAppAttempts(maxAttempts)}. */
  public static void setMaxAppAttempts(ApplicationSubmissionContext context, int maxAttempts) {
    context.setMaxAppAttempts(maxAttempts);
    context.setAttemptFailuresValidityInterval(Long.getLong(VALIDITY_INTERVAL, -1L));
  }

  /** Stands in for {@code ContainerLaunchContext.newInstance}, which skein's driver calls for
   * the ApplicationMaster's container alone: its java command gets our JVM options when the
   * application localizes the agent jar they name; another skein application's is skein's.
   * IllegalStateException if skein's command is not as skein 0.8.2 writes it. */
  public static ContainerLaunchContext newInstance(
      Map<String, LocalResource> localResources, Map<String, String> environment,
      List<String> commands, Map<String, ByteBuffer> serviceData, ByteBuffer tokens,
      Map<ApplicationAccessType, String> acls) {
    String options = System.getProperty(AM_JAVA_OPTIONS);
    if (localResources.containsKey(agentJar(options))) {
      List<String> ours = new ArrayList<String>();
      for (String command : commands) {
        if (!command.contains(SKEIN_AM_JAVA)) {
          throw new IllegalStateException("skein's ApplicationMaster command does not start "
              + "with " + SKEIN_AM_JAVA + ": not skein 0.8.2? " + command);
        }
        ours.add(command.replace(SKEIN_AM_JAVA, "/bin/java " + options.trim() + " "));
      }
      commands = ours;
    }
    return ContainerLaunchContext.newInstance(
        localResources, environment, commands, serviceData, tokens, acls);
  }

  /** The jar of {@code -javaagent:<jar>[=<argument>]} in {@code options}; null if none. */
  static String agentJar(String options) {
    for (String option : options.trim().split("\\s+")) {
      if (option.startsWith("-javaagent:")) {
        String jar = option.substring("-javaagent:".length());
        int argument = jar.indexOf('=');
        return argument < 0 ? jar : jar.substring(0, argument);
      }
    }
    return null;
  }
}
