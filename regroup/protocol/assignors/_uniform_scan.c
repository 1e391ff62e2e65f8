/* The uniform assignor's one pass over a group that only grew since its last assignment.
 *
 * Rules of this file (its Python twin, `regroup.protocol.assignors.uniform_scan.scan_grown_python`,
 * states the same ones, and the tests hold the two to the same answers):
 *
 * 1. It decides nothing that the assignor's rules decide. It answers one question: is this group
 *    the remembered result `targets` plus joiners? That is: `members` is a dict holding every
 *    member of `targets`, each holding its target (the same object, or an equal one); its other
 *    members (the joiners) hold nothing (`empty`, or a set equal to it); and every member subscribes
 *    to `topics` (the same object, or an equal one). If so it returns
 *    (every member id -> its current set, in the order of `members`;
 *     the ids, sets and sizes of the members whose size is not `quota`;
 *     the sum of the sizes);
 *    otherwise None, and the assignor takes its general path. The assignor then moves shards
 *    between the members off quota (`uniform._rebalance`); the others keep their sets.
 * 2. Why C: a coordinator assigns a group on every join; for a group that only grew, the
 *    assignment is this pass plus a few moves, where Python made about ten passes over the members.
 * 3. It reads members through attribute access (`topics`, `current`), so any MemberSpec works;
 *    errors raised by comparisons propagate.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

static PyObject *str_topics;
static PyObject *str_current;

/* Where a member type keeps `topics` and `current` when they are plain slots (a slotted dataclass
 * such as MemberSpec): read straight from the object, as the slot's descriptor would. Learned from
 * the type's descriptors and trusted while the type's version tag is the one they were read at (a
 * type changed since, e.g. given a property, has another tag, so its attributes are read again). */
static PyTypeObject *slotted_type;
static unsigned int slotted_tag;
static Py_ssize_t topics_offset, current_offset;

static int
slots_known(PyTypeObject *type)
{
    return type == slotted_type && slotted_tag != 0 && type->tp_version_tag == slotted_tag;
}

static Py_ssize_t
slot_offset(PyTypeObject *type, PyObject *name)
{
    PyObject *descr = _PyType_Lookup(type, name);  /* borrowed */
    if (descr == NULL || Py_TYPE(descr) != &PyMemberDescr_Type)
        return -1;
    PyMemberDef *def = ((PyMemberDescrObject *)descr)->d_member;
    return def->type == T_OBJECT_EX ? def->offset : -1;
}

/* A new reference to spec.<name>, from its slot when its type's slots are known. */
static PyObject *
member_attr(PyObject *spec, PyObject *name, Py_ssize_t offset)
{
    if (slots_known(Py_TYPE(spec))) {
        PyObject *value = *(PyObject **)((char *)spec + offset);
        if (value != NULL) {
            Py_INCREF(value);
            return value;
        }
    }
    return PyObject_GetAttr(spec, name);  /* another type, or an unset slot: the usual way */
}

static void
learn_slots(PyObject *spec)
{
    PyTypeObject *type = Py_TYPE(spec);
    Py_ssize_t t = slot_offset(type, str_topics), c = slot_offset(type, str_current);
    if (t < 0 || c < 0)
        return;  /* not plain slots: read through getattr */
    Py_INCREF(type);
    Py_XSETREF(slotted_type, type);
    slotted_tag = type->tp_version_tag;  /* set by the lookups above (0: the type has none) */
    topics_offset = t;
    current_offset = c;
}

/* 1 if a is b or a == b, 0 if not, -1 on error. */
static int
same(PyObject *a, PyObject *b)
{
    if (a == b)
        return 1;
    return PyObject_RichCompareBool(a, b, Py_EQ);
}

/* The member's current set if it is what `targets` (or, for a joiner, `empty`) says it holds and
 * it subscribes to `topics`; NULL with no error set if not; NULL with an error on an error. */
static PyObject *
held_as_remembered(PyObject *mid, PyObject *spec, PyObject *targets, PyObject *topics,
                   PyObject *empty, Py_ssize_t *old)
{
    PyObject *member_topics = member_attr(spec, str_topics, topics_offset);
    if (member_topics == NULL)
        return NULL;
    int ok = same(member_topics, topics);
    Py_DECREF(member_topics);
    if (ok <= 0)
        return NULL;
    PyObject *current = member_attr(spec, str_current, current_offset);
    if (current == NULL)
        return NULL;
    PyObject *target = PyDict_GetItemWithError(targets, mid);  /* borrowed: held while compared */
    if (target != NULL) {
        ++*old;
        Py_INCREF(target);
        ok = same(current, target);
        Py_DECREF(target);
    } else {
        ok = PyErr_Occurred() ? -1 : same(current, empty);  /* not remembered: a joiner */
    }
    if (ok <= 0) {
        Py_DECREF(current);
        return NULL;
    }
    return current;
}

static PyObject *
scan_grown(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "scan_grown(members, targets, topics, empty, quota) takes 5 arguments");
        return NULL;
    }
    PyObject *members = args[0], *targets = args[1], *topics = args[2], *empty = args[3];
    Py_ssize_t quota = PyLong_AsSsize_t(args[4]);
    if (quota == -1 && PyErr_Occurred())
        return NULL;
    if (!PyDict_CheckExact(members) || !PyDict_CheckExact(targets))
        Py_RETURN_NONE;
    Py_ssize_t n = PyDict_GET_SIZE(members);
    if (n < PyDict_GET_SIZE(targets))
        Py_RETURN_NONE;

    PyObject *off_mids = NULL, *off_sets = NULL, *off_sizes = NULL;
    PyObject *final = _PyDict_NewPresized(n);
    if (final == NULL || (off_mids = PyList_New(0)) == NULL || (off_sets = PyList_New(0)) == NULL
            || (off_sizes = PyList_New(0)) == NULL)
        goto fail;
    Py_ssize_t pos = 0, old = 0, total = 0;
    PyObject *mid, *spec;
    while (PyDict_Next(members, &pos, &mid, &spec)) {
        if (!slots_known(Py_TYPE(spec)))  /* the first member, or another type */
            learn_slots(spec);
        /* Held while comparisons run Python code (a set's __eq__) that could drop the dict's own. */
        Py_INCREF(mid);
        Py_INCREF(spec);
        PyObject *current = held_as_remembered(mid, spec, targets, topics, empty, &old);
        Py_DECREF(spec);
        if (current == NULL) {
            Py_DECREF(mid);
            goto fail;
        }
        Py_ssize_t size = PyObject_Size(current);
        int bad = size < 0 || PyDict_SetItem(final, mid, current) < 0;
        if (!bad && size != quota) {
            PyObject *size_obj = PyLong_FromSsize_t(size);
            bad = size_obj == NULL || PyList_Append(off_mids, mid) < 0
                  || PyList_Append(off_sets, current) < 0 || PyList_Append(off_sizes, size_obj) < 0;
            Py_XDECREF(size_obj);
        }
        Py_DECREF(current);
        Py_DECREF(mid);
        if (bad)
            goto fail;
        total += size;
    }
    if (PyDict_GET_SIZE(final) != n || old != PyDict_GET_SIZE(targets))
        goto fail;  /* the members changed during the scan, or a member of the result left */
    return Py_BuildValue("(NNNNn)", final, off_mids, off_sets, off_sizes, total);

fail:  /* not grown (no error set), or an error */
    Py_XDECREF(final);
    Py_XDECREF(off_mids);
    Py_XDECREF(off_sets);
    Py_XDECREF(off_sizes);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"scan_grown", (PyCFunction)(void (*)(void))scan_grown, METH_FASTCALL,
     "scan_grown(members, targets, topics, empty, quota)\n"
     "-> (current sets by member, off-quota ids, their sets, their sizes, total) | None\n\n"
     "See regroup.protocol.assignors.uniform_scan, and its Python twin scan_grown_python."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_uniform_scan",
    "The uniform assignor's pass over a group that only grew (see uniform_scan).", -1, methods,
};

PyMODINIT_FUNC
PyInit__uniform_scan(void)
{
    str_topics = PyUnicode_InternFromString("topics");
    str_current = PyUnicode_InternFromString("current");
    if (str_topics == NULL || str_current == NULL)
        return NULL;
    return PyModule_Create(&module_def);
}
