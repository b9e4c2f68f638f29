package tierengine.kafka;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Properties;
import java.util.stream.Stream;

import jep.JepException;
import jep.MainInterpreter;
import jep.PyConfig;
import jep.SharedInterpreter;

/**
 * CPython inside this JVM, through jep: started once per JVM from one venv, with an
 * interpreter per calling thread (jep interpreters are confined to the thread that made them;
 * they share one CPython, its modules and the engine's state). The engine releases the GIL in
 * every blocking call, so broker threads calling at once overlap their I/O and native work.
 */
final class EngineRuntime {
    /** The Python module the plugin calls (engine/remote/broker_plugin.py). */
    static final String BRIDGE = "engine.remote.broker_plugin";

    private static EngineRuntime instance;

    private final Path venv;
    private final ThreadLocal<SharedInterpreter> interpreters = new ThreadLocal<>();

    private EngineRuntime(Path venv) {
        this.venv = venv;
    }

    /**
     * The runtime of this JVM, started from {@code venv} on first use. CPython can be started
     * once per process: a later call naming another venv fails.
     *
     * @param key the configuration key that named the venv, for error messages
     */
    static synchronized EngineRuntime start(Path venv, String key) throws PluginConfigException {
        if (instance != null) {
            if (!instance.venv.equals(venv)) {
                throw new PluginConfigException(key + "=" + venv + ": this broker's Python is "
                        + "already running from " + instance.venv + " (one venv per JVM)");
            }
            return instance;
        }
        Path python = venv.resolve("bin").resolve("python");
        if (!Files.isDirectory(venv) || !Files.isRegularFile(venv.resolve("pyvenv.cfg"))
                || !Files.isExecutable(python)) {
            throw new PluginConfigException(key + "=" + venv + ": not a Python virtual "
                    + "environment (no pyvenv.cfg or bin/python); create it with "
                    + "scripts/setup.sh");
        }
        Path jepDir = findJep(venv, key);
        Path library = jepDir.resolve("libjep.so");
        checkJepVersion(jepDir, key, venv);
        try {
            MainInterpreter.setJepLibraryPath(library.toString());
            MainInterpreter.setInitParams(PyConfig.python().setProgramName(python.toString()));
        } catch (IllegalStateException e) {
            throw new PluginConfigException(key + "=" + venv + ": jep was already started in "
                    + "this JVM by something else");
        }
        EngineRuntime runtime = new EngineRuntime(venv);
        try {
            runtime.interpreter();
        } catch (PluginConfigException e) {
            throw e;
        } catch (Throwable e) {  // UnsatisfiedLinkError and jep's Errors included
            throw new PluginConfigException(key + "=" + venv + ": CPython could not be started "
                    + "through " + library + ": " + e);
        }
        instance = runtime;
        return runtime;
    }

    private static Path findJep(Path venv, String key) throws PluginConfigException {
        Path lib = venv.resolve("lib");
        try (Stream<Path> dirs = Files.isDirectory(lib) ? Files.list(lib) : Stream.empty()) {
            return dirs.filter(d -> d.getFileName().toString().startsWith("python"))
                    .map(d -> d.resolve("site-packages").resolve("jep"))
                    .filter(d -> Files.isRegularFile(d.resolve("libjep.so")))
                    .findFirst()
                    .orElseThrow(() -> new PluginConfigException(key + "=" + venv + ": jep is "
                            + "not installed in it (no lib/python3.*/site-packages/jep/libjep.so); "
                            + "scripts/setup.sh installs it"));
        } catch (IOException e) {
            throw new PluginConfigException(key + "=" + venv + ": cannot be read: " + e);
        }
    }

    /** The jep classes in this jar must be those of the venv's libjep. */
    private static void checkJepVersion(Path jepDir, String key, Path venv)
            throws PluginConfigException {
        String built = pluginProperty("jep.version");
        Path versionFile = jepDir.resolve("version.py");
        String installed = null;
        try {
            for (String line : Files.readAllLines(versionFile)) {
                if (line.startsWith("__VERSION__")) {
                    installed = line.replaceAll("^[^=]*=\\s*['\"]([^'\"]*)['\"].*$", "$1");
                }
            }
        } catch (IOException e) {
            throw new PluginConfigException(key + "=" + venv + ": cannot read " + versionFile
                    + ": " + e);
        }
        if (installed == null || !installed.equals(built)) {
            throw new PluginConfigException(key + "=" + venv + ": its jep is " + installed
                    + " but this plugin was built with jep " + built + "; rebuild the plugin "
                    + "with scripts/setup.sh");
        }
    }

    static String pluginProperty(String name) {
        Properties props = new Properties();
        try (InputStream in = EngineRuntime.class.getResourceAsStream("plugin.properties")) {
            if (in != null) {
                props.load(in);
            }
        } catch (IOException e) {
            return null;
        }
        return props.getProperty(name);
    }

    /** This thread's interpreter, made (and the bridge imported) on the thread's first call. */
    private SharedInterpreter interpreter() throws PluginConfigException {
        SharedInterpreter interp = interpreters.get();
        if (interp != null) {
            return interp;
        }
        try {
            interp = new SharedInterpreter();
        } catch (JepException e) {
            throw new PluginConfigException("venv " + venv + ": no Python interpreter for "
                    + "thread " + Thread.currentThread().getName() + ": " + e.getMessage());
        }
        try {
            interp.exec("from " + BRIDGE + " import *");
        } catch (JepException e) {
            interp.close();
            throw new PluginConfigException("venv " + venv + ": the engine cannot be imported ("
                    + BRIDGE + "): " + e.getMessage());
        }
        interpreters.set(interp);
        return interp;
    }

    /**
     * Calls a function of the bridge module on this thread's interpreter.
     *
     * @throws EngineException the engine's error, typed by the bridge's exception class
     */
    Object call(String function, Object... args) throws EngineException {
        SharedInterpreter interp;
        try {
            interp = interpreter();
        } catch (PluginConfigException e) {
            throw new EngineException(EngineException.Kind.STORAGE, e.getMessage());
        }
        try {
            return interp.invoke(function, args);
        } catch (JepException e) {
            throw EngineException.of(e);
        }
    }

    /** Closes this thread's interpreter (others end with their threads or the JVM). */
    void releaseThread() {
        SharedInterpreter interp = interpreters.get();
        if (interp != null) {
            interpreters.remove();
            try {
                interp.close();
            } catch (JepException e) {
                // nothing is left to release on this thread
            }
        }
    }
}
