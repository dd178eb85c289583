package org.flinkyarn.skeinagent;

import static net.bytebuddy.matcher.ElementMatchers.any;

import net.bytebuddy.asm.AsmVisitorWrapper;
import net.bytebuddy.jar.asm.MethodVisitor;
import net.bytebuddy.utility.OpenedClassReader;

/** A string constant of a class's methods, replaced: where skein's driver sets, lists and
 * checks the application type {@code "skein"}, the constant is our type. */
final class StringConstants {
  private StringConstants() {}

  static AsmVisitorWrapper replacing(String constant, String replacement) {
    return new AsmVisitorWrapper.ForDeclaredMethods().invokable(any(),
        (type, method, visitor, context, pool, writerFlags, readerFlags) ->
            new MethodVisitor(OpenedClassReader.ASM_API, visitor) {
              @Override
              public void visitLdcInsn(Object value) {
                super.visitLdcInsn(constant.equals(value) ? replacement : value);
              }
            });
  }
}
