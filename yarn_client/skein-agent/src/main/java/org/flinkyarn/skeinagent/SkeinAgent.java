package org.flinkyarn.skeinagent;

import static net.bytebuddy.matcher.ElementMatchers.isConstructor;
import static net.bytebuddy.matcher.ElementMatchers.isDeclaredBy;
import static net.bytebuddy.matcher.ElementMatchers.isSubTypeOf;
import static net.bytebuddy.matcher.ElementMatchers.nameStartsWith;
import static net.bytebuddy.matcher.ElementMatchers.named;

import java.lang.instrument.Instrumentation;
import java.lang.reflect.Method;
import net.bytebuddy.agent.builder.AgentBuilder;
import net.bytebuddy.asm.Advice;
import net.bytebuddy.asm.AsmVisitorWrapper;
import net.bytebuddy.asm.MemberSubstitution;
import net.bytebuddy.matcher.ElementMatcher;
import net.bytebuddy.description.method.MethodDescription;

/**
 * flinkyarn's changes to skein 0.8.2 (the one version setup.cfg allows), made as skein's
 * classes load. skein has no option for any of them.
 *
 * <p>{@code -javaagent:<jar>=driver}, in the JVM of skein's driver that the client starts:
 * <ul>
 *   <li>the YARN application type is {@code flinkyarn}, where skein's driver sets, lists and
 *       checks {@code skein} ({@link StringConstants});
 *   <li>the ApplicationMaster's JVM starts with the options of the system property
 *       {@value DriverHooks#AM_JAVA_OPTIONS} instead of skein's {@code -Xmx128M}
 *       ({@link DriverHooks#newInstance});
 *   <li>the attempt-failures validity interval is set from the system property
 *       {@value DriverHooks#VALIDITY_INTERVAL} ({@link DriverHooks#setMaxAppAttempts}).
 * </ul>
 *
 * <p>{@code -javaagent:<jar>=appmaster}, in the ApplicationMaster's JVM:
 * <ul>
 *   <li>the allocate heartbeat intervals and the allocator's wait ({@link AllocatorHooks});
 *   <li>the final tracking URL at unregister and the decision which attempt is the last
 *       ({@link AppMasterHooks}).
 * </ul>
 *
 * <p>A class that cannot be changed is reported on the JVM's standard error (its log);
 * the tests in tests/unit/test_skein_agent.py run skein's own classes with this agent.
 */
public final class SkeinAgent {
  public static final String DRIVER = "driver";
  public static final String APPMASTER = "appmaster";

  private static final String SKEIN = "com.anaconda.skein.";

  private SkeinAgent() {}

  public static void premain(String role, Instrumentation instrumentation) throws Exception {
    AgentBuilder agent = new AgentBuilder.Default()
        .with(AgentBuilder.TypeStrategy.Default.REDEFINE)
        .with(AgentBuilder.Listener.StreamWriting.toSystemError().withErrorsOnly());
    if (DRIVER.equals(role)) {
      agent = driver(agent);
    } else if (APPMASTER.equals(role)) {
      agent = appMaster(agent);
    } else {
      throw new IllegalArgumentException(
          "flinkyarn's skein agent: the argument is " + DRIVER + " or " + APPMASTER
          + ", not " + role);
    }
    agent.installOn(instrumentation);
  }

  private static AgentBuilder driver(AgentBuilder agent) throws Exception {
    if (System.getProperty(DriverHooks.AM_JAVA_OPTIONS) == null) {
      throw new IllegalStateException(
          "flinkyarn's skein agent: -D" + DriverHooks.AM_JAVA_OPTIONS + " is not set");
    }
    AsmVisitorWrapper applicationType =
        StringConstants.replacing("skein", DriverHooks.APPLICATION_TYPE);
    return agent
        .type(named(SKEIN + "Driver"))
        .transform((builder, type, loader, module, domain) -> builder
            .visit(applicationType)
            .visit(calls(named("setMaxAppAttempts"),
                         hook(DriverHooks.class, "setMaxAppAttempts"), "submitApplicationInner"))
            .visit(calls(named("newInstance").and(isDeclaredBy(
                             named("org.apache.hadoop.yarn.api.records.ContainerLaunchContext"))),
                         hook(DriverHooks.class, "newInstance"), "submitApplicationInner")))
        .type(named(SKEIN + "Driver$DriverImpl"))
        .transform((builder, type, loader, module, domain) -> builder.visit(applicationType));
  }

  private static AgentBuilder appMaster(AgentBuilder agent) throws Exception {
    return agent
        .type(named(SKEIN + "ApplicationMaster"))
        .transform((builder, type, loader, module, domain) -> builder
            .visit(Advice.to(AllocatorHooks.Intervals.class).on(isConstructor()))
            .visit(calls(named("unregisterApplicationMaster"),
                         hook(AppMasterHooks.class, "unregisterApplicationMaster"), "runOnExit"))
            .visit(calls(named("getAttemptId"),
                         hook(AppMasterHooks.class, "getAttemptId"), "runOnExit")))
        // The allocator: javac's anonymous Thread of startAllocator, the one thread of
        // skein's ApplicationMaster that sleeps.
        .type(nameStartsWith(SKEIN + "ApplicationMaster$").and(isSubTypeOf(Thread.class)))
        .transform((builder, type, loader, module, domain) -> builder
            .visit(calls(named("sleep").and(isDeclaredBy(Thread.class)),
                         hook(AllocatorHooks.class, "sleep"), "run")))
        .type(named(SKEIN + "ApplicationMaster$ServiceTracker"))
        .transform((builder, type, loader, module, domain) -> builder
            .visit(calls(named("addContainerRequest"),
                         hook(AllocatorHooks.class, "addContainerRequest"), "requestContainer")));
  }

  /** In skein's method {@code inMethod}: each call of a method {@code callee} matches goes to
   * our static {@code hook} instead, which takes the callee's receiver (if any) first and then
   * its arguments. */
  private static AsmVisitorWrapper calls(ElementMatcher<? super MethodDescription> callee,
                                         Method hook, String inMethod) {
    return MemberSubstitution.relaxed().method(callee).replaceWith(hook).on(named(inMethod));
  }

  private static Method hook(Class<?> owner, String name) {
    for (Method method : owner.getDeclaredMethods()) {
      if (method.getName().equals(name)) {
        return method;
      }
    }
    throw new IllegalStateException(owner + " has no method " + name);
  }
}
